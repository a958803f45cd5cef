"""The Streamlit app (``simcore app``): :mod:`simcore.app.logic` holds the pure
functions the pages call; :mod:`simcore.app.main` is the Streamlit script."""
