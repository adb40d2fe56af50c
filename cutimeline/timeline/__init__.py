"""The store: the data model's constants (``schema``), ``Table`` and
``Strings`` (``table``), ``Timeline`` (columnar numpy tables, one string
table, JSON meta), the ``.ctl`` file's bytes (``ctlfile/``: the format,
its column codec and predictions, the zip members, a recording's journal),
what a write may replace (``destination``) and what an input file may claim
(``budgets``), the invariants a Timeline read from outside must hold
(``invariants``), the tables as Arrow/Polars (``arrow``) and Parquet (``parquet``), GPU names (``gpus``), step windows
(``windows``), and which rank each row of a merged Timeline came from
(``ranks``)."""
