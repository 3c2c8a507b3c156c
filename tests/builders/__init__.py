"""What tests build their fixtures with: real writers at real sizes, one builder for each thing.

Test modules import from here (``from builders.tensorboard import write_scalars``), never from
one another (tests/test_layers.py checks it): a helper a second test needs moves here.

    tensorboard   event files through torch's and tensorboardX's SummaryWriter
    wandb_runs    W&B offline runs through wandb itself
    trainers      runs written by the trainers' own code (SpecForge, speculators, HF Trainer)
    mappings      the story's two vocab mappings (252 of 32 000 positions agree)
    tui           runs for the TUI tests and snapshots, and the frozen clock
    samples       the committed sample_runs/, copied file by file
    waiting       waits on conditions, bounded by a timeout that grows with the machine's load
"""
