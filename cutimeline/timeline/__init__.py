"""The store: the data model's constants (``schema``), ``Table`` and
``Strings`` (``table``), ``Timeline`` (columnar numpy tables, one string
table, JSON meta), the ``.ctl`` file format (``fileformat``), a recording's
journal on disk (``journal``), what a write may replace (``destination``),
how a name from a trace is shown (``display``), the tables as Arrow/Polars
(``arrow``) and Parquet (``parquet``), and which rank each row of a merged
Timeline came from (``ranks``)."""
