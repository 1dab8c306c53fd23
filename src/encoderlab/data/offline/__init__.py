"""The offline suite (`encoderlab data prepare offline`): build.py fetches the pinned sources and builds the tasks
(units.py, qa.py, ir.py) and the leak-free corpus; taskfiles.py is the task-file format the evaluation reads."""

# The tasks `encoderlab data prepare offline` builds (build.py, qa.py, ir.py): named before the suite is prepared,
# so that asking for one says to prepare it (tests/integration/test_offline_suite.py checks a build makes these).
SUITE_TASKS = ("rt-polarity", "imdb-polarity", "wiki-topic", "conll-ner", "conll-pos", "conll-chunk", "conll-cloze",
               "wiki-cloze", "wiki-title-span", "wiki-description", "wiki-title", "imdb-long")
