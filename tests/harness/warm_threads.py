"""A module that starts a thread at import: a warm parent must refuse to preload it."""

import threading
import time

threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
