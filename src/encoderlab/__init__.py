"""encoderlab: pretrain text encoders with MLM, CLM or any schedule of the two."""
__version__ = "0.1.0"
