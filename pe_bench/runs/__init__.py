"""The run directory, pe-bench's database, owned by this package: its name and identity (naming), its record
meta.json (meta: RunMeta, Status), the state a run is in (state), provenance, and the directory with its files
(directory: Run). Files are written atomically (pe_bench.atomic)."""

from pe_bench.atomic import atomic_save, atomic_write_text, file_sha256, read_csv, write_csv
from pe_bench.runs.directory import ANALYSIS_META, CHECKPOINT, LOCK, Run, RunBusy, check_checkpoint
from pe_bench.runs.meta import SCHEMA, RunFileError, RunMeta, Status, numerics_of
from pe_bench.runs.naming import (BOOKKEEPING, checkpoint_identity, digest, finetune_of, identity, run_dir_for,
                                  run_name)
from pe_bench.runs.provenance import (CODE, ISA_CAPS, cpu_isa, device_name, git_modified, git_sha, git_tracked,
                                      numerics)
from pe_bench.runs.state import State, state_of

__all__ = ["ANALYSIS_META", "BOOKKEEPING", "CHECKPOINT", "CODE", "ISA_CAPS", "LOCK", "SCHEMA", "Run", "RunBusy",
           "RunFileError", "RunMeta", "State", "Status", "atomic_save", "atomic_write_text", "check_checkpoint",
           "checkpoint_identity", "cpu_isa", "device_name", "digest", "file_sha256", "finetune_of", "git_modified", "git_sha",
           "git_tracked", "identity", "numerics", "numerics_of", "read_csv", "run_dir_for", "run_name", "state_of",
           "write_csv"]
