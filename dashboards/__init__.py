"""The Streamlit audit UI (``retryscope ui PATH``); needs the ui extra.

Streamlit, Altair and pandas are checked here, before a server process starts, so a missing
extra is named in the caller instead of in a child process's traceback.
"""

from retryscope._extras import require_extra

require_extra(__name__, "ui", "streamlit", "altair", "pandas")
