"""The runner: the `rcbook` CLI, chapter execution (papermill), parameters, results and records, the
claims ledger, kernel variants, the Sphinx extension and the handle a chapter calls (`notebook`)."""
