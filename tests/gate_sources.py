"""Store modules the gate tests write into a pytester directory (as source text)."""

OK_STORE = """
from ferry_core import LeaseStore

def make(path, *, clock):
    return LeaseStore(path, clock=clock)
"""

LOCK_BROKEN = '''
from ferry_core import LeaseStore

class Broken(LeaseStore):
    """Takes the daemon lock whoever holds it."""

    def acquire_lock(self, name, owner, ttl_ms):
        now = self.clock()
        self._rows(
            "INSERT INTO daemon_locks(name, owner, expires_at, acquired_at) VALUES (?,?,?,?)"
            " ON CONFLICT(name) DO UPDATE SET owner=excluded.owner, expires_at=excluded.expires_at",
            (name, owner, now + ttl_ms, now))
        return True

def make(path, *, clock):
    return Broken(path, clock=clock)
'''
