"""`python -m encoderlab.cli ...` (and `torchrun -m encoderlab.cli ...`): the same as the `encoderlab` command."""
from encoderlab.cli import main

main()
