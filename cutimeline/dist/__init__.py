"""Many ranks: their recordings merged on one clock (``merger``, with one
clock line per rank fitted by ``rankclock``), collectives matched across
ranks (``matching``), and who waited for whom (``straggler``). The recording
side of a rank (its meta, its file, its collectives) lives in ``recording``."""
