"""Reports: run directories → tables. ``collect`` reads every run's rows whole (one collector: perplexity rows for a
task scored by perplexity, accuracy rows for one scored by accuracy), ``labels`` names the rows, ``perplexity``,
``accuracy`` and ``extension`` render their tables, ``files`` reads the CSVs a run holds and writes a report
directory all at once. The figures are drawn a layer up (pe_bench.plots) and written with the tables by
pe_bench.publish."""

from pe_bench.report.collect import (FINETUNE_COLUMNS, Accuracy, Collected, Collection, collect, collect_accuracy,
                                     collect_all, collect_positions, collect_runs)
from pe_bench.report.files import (NOT_A_NUMBER, STATUS_CELL, STATUSES, WINDOW_KEY, agrees, check_against_windows,
                                   read_accuracy_rows, read_eval_rows, read_whole_csv, read_windows, recomputed_ppl,
                                   replace_together, window_key)
from pe_bench.report.labels import UNLABELLED, config_identity, flatten, mixed_numerics
from pe_bench.report.perplexity import (BOOTSTRAP, LEGEND, MODES, best_marks, compare, comparison, rich_table,
                                        row_names, write_table_files, write_tables)

__all__ = ["BOOTSTRAP", "FINETUNE_COLUMNS", "LEGEND", "MODES", "NOT_A_NUMBER", "STATUSES", "STATUS_CELL", "UNLABELLED",
           "WINDOW_KEY", "Accuracy", "Collected", "Collection", "agrees", "best_marks", "check_against_windows",
           "collect", "collect_accuracy", "collect_all", "collect_positions", "collect_runs", "compare", "comparison",
           "config_identity", "flatten", "mixed_numerics", "read_accuracy_rows", "read_eval_rows",
           "read_whole_csv", "read_windows", "recomputed_ppl", "replace_together", "rich_table", "row_names",
           "window_key", "write_table_files", "write_tables"]
