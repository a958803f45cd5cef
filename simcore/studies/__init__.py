"""Studies built on the engine: the co-design explorer (:mod:`.codesign`), family
comparison (:mod:`.compare`), the serving planner (:mod:`.serving`) and the figures and
reports they draw (:mod:`.plot`, :mod:`.report`). Never imports the CLI or the app."""
