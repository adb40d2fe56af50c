"""On-demand capture's files, and whom they trust.

``arm()`` (``recording/ondemand.py``: the armed job's side) and
``cutimeline capture PID`` (``request.py``: the sender's side) talk
through a marker and a request file in a private folder of the job's user
(``files.py``: the folder, the names, the trust model, the process
checks); every file either side touches, and each capture the job
writes, is opened through ``heldfolder.Folder``, one walker by directory
descriptor that follows no link.
"""
