"""The kdat Python test harness: parses include/ (the state table, the uapi structs) and drives
/dev/kdat through raw ioctls.  Nothing here is retyped from the C headers."""
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = os.path.join(REPO, "include")
