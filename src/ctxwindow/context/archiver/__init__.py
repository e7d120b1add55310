"""A manager's archive I/O: ``aio`` (``Archiver``, written once) and ``sync`` (generated).

See ``context/archiver/aio.py``; the queue and the batches it works on are
``context/archiving.py``'s.
"""
