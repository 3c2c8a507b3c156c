"""TensorBoard event files: incremental, vectorised, corruption-tolerant reading of scalars.

The rooms, as tensorboard's Rust reader (tensorboard/data/server) splits the same job, bottom up:

    crc        masked CRC-32C, and the tables the bulk paths check thousands of records with
    framing    TFRecord framing: a buffer into whole records, damage stepped over
    wire       the protobuf walker: where a scalar event keeps wall_time, step and value
    columns    those fields read out of many records at once (numpy)
    templates  one skeleton per (tag, writer, layout), matched exactly
    decode     a buffer of records into points: templates first, upb for the rest
    event_file one file's appended bytes read in windows, holes and zero tails skipped
    reader     a run's event files, polled; restarts, series names, discovery
    tuning     the read sizes tests turn small

Importers name the module that holds what they use (``from triage_tui.core.read.events.reader import
RunEvents``); this package re-exports nothing.
"""
