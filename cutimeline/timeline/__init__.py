"""The store: the data model's constants (``schema``), ``Table`` and
``Strings`` (``table``), ``Timeline`` (columnar numpy tables, one string
table, JSON meta), the ``.ctl`` file format (``fileformat``), the tables as
Arrow/Polars (``arrow``) and Parquet (``parquet``), and which rank
each row of a merged Timeline came from (``ranks``)."""
