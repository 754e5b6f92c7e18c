"""rankcollapse: the library behind the rank-collapse companion book.

Chapters (``chapters/*.md``) import this package, call it, plot and glue; all computation lives here:

* :mod:`rankcollapse.core` -- Part I's mathematics (networks, paths, residuals and ranks, bounds, LN, ...);
* :mod:`rankcollapse.toy` -- the toy networks of Figures 3 and 4, their tasks and training;
* :mod:`rankcollapse.lm` -- Part III's small LM, its training, the gradient path and shared runs;
* :mod:`rankcollapse.hf` -- Hugging Face models and surgery (Figure 2);
* :mod:`rankcollapse.chapters` -- one module per chapter (schema, experiments, figures);
* :mod:`rankcollapse.book` -- the runner (``rcbook``) and :mod:`rankcollapse.book.notebook`, the handle a
  chapter calls; :mod:`rankcollapse.store` and :mod:`rankcollapse.procs` -- the store and process lifetimes.

The science never imports the runner.
"""

__version__ = "0.1.0"
