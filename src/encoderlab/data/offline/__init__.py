"""The offline suite (`encoderlab data prepare offline`): build.py fetches the pinned sources and builds the tasks
(units.py, qa.py, ir.py) and the leak-free corpus; taskfiles.py is the task-file format the evaluation reads."""
