"""What tests build their fixtures with: real writers at real sizes, one builder for each thing.

Test modules import from here (``from builders.tensorboard import write_scalars``), never from
one another (tests/test_layers.py checks it): a helper a second test needs moves here.

    tensorboard   event files through torch's and tensorboardX's SummaryWriter
    events        event files byte by byte (TFRecord framing), the reference reader for what
                  TensorBoard's data server does not show, and a tree's event files found and one
                  file read by the product's reader in one poll
    rustboard     what TensorBoard's own data server shows for event files: the event reader's oracle
    tensorboard_web  TensorBoard's own shipped smoothing, run with Node.js: the EMA's oracle
    curves        scalar curves whose flags are known (the story's)
    wandb_runs    W&B offline runs through wandb itself; single records (hostile ones too) framed as
                  wandb's writer frames them
    trainers      runs written by the trainers' own code (SpecForge, speculators, HF Trainer)
    consoles      training consoles as HF Trainer, speculators, SpecForge and torchrun write them;
                  SpecForge's output directory by its own trainer loop (built once, cached)
    mappings      the story's two vocab mappings (252 of 32 000 positions agree)
    drafter       EAGLE-3 drafter checkpoints per layout (SpecForge, speculators, modelopt)
    target        target models as the hub stores them
    dumps         hidden-state dumps as the trainers' data preparation writes them
    replay        a small world a drafter is really trained in (the replay's known answer)
    check_run     a whole run for ``triage check``: drafter, target, mapping, dumps, events
    remap         a remap's world and witnesses (fixtures registered by tests/conftest.py)
    serving       vLLM and SGLang logs and Prometheus pages as the engines write them
    contracts     drafters, mappings and runs for the config-contract and mapping-health checks
    tui           runs for the TUI tests and snapshots, and the frozen clock
    pilot         driving the app in Pilot tests: waits on what is needed, never on time
    samples       the committed sample_runs/, copied file by file
    cache         fixtures built once per machine or once per test run, rebuilt when what built them changes
    waiting       waits on conditions, bounded by a timeout that grows with the machine's load
    children      trainer-like child processes: a SummaryWriter loop, an idle holder of a log, their end
    target_dumps  a tiny transformers target's own dumps of answers it generated, masks by SpecForge's parser
    object_store  moto's real S3 server in a child process, and a counting, fault-injecting HTTP proxy before it
    modelopt      EAGLE-3 drafters exported by nvidia-modelopt's own exporter, beside their target
    hub_cache     models placed in a Hugging Face cache in huggingface_hub's layout (no network)
    commands      the ``triage`` fixture: a command run by cli.main in the test's own process
    trackers      Lightning CSVLogger and torchtune DiskLogger files byte for byte as they write them
                  (held to the committed files their own code wrote)
"""
