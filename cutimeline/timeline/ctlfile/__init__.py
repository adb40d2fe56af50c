"""The ``.ctl`` file, byte for byte: ``fileformat`` writes and reads it (a
zip of ``meta.json`` and ``columns.bin``; the older ``.npz`` formats are
read), ``prediction`` picks how each column is predicted and
``columncodec`` packs what is left, ``archive`` reads zip members within
what they claim, and ``journal`` is a recording's file while it is being
written (what a killed process leaves; ``fileformat.read`` reads it too).
Nothing here knows about analysis; ``Timeline.save`` and
``timeline.load`` are the doors."""
