"""Part III's study (Hofmann & Mäder): the runs the four repair chapters share, as one typed layer.

A chapter's parameters become a :class:`~rankcollapse.repair.spec.StudySpec` once, in
:func:`rankcollapse.book.repair_params.study_spec`; everything here takes that spec (or its parts) and the
:mod:`rankcollapse.lm` specs, never a chapter's parameter namespace. The modules:

- :mod:`.spec`: the settings (driver, branches, recovery rule) and the study spec holding them;
- :mod:`.drivers`: the run, driver and healthy specs and jobs, and the main drivers and healthy runs;
- :mod:`.stages`: training a stage of jobs (locks, dispatch, chains of branches);
- :mod:`.treatments`: the treatment branches from a saved collapse and the added loss they are set to;
- :mod:`.events`: the collapse events the branches start from, and each loss term's calibration;
- :mod:`.controls`: never-collapsed control drivers, alone or as chains sharing their first steps;
- :mod:`.recovery`: reading a run's history (srank at a step, medians, Q) and its recovery after a switch.

Two chapters with the same driver settings ask :func:`rankcollapse.lm.training.driver` for the same
:class:`~rankcollapse.lm.training.DriverSpec`, so the second one loads the first one's saved collapses from
``build/states/<key>/`` instead of training them again; it never reads another chapter's output folder.
"""
