//! Advisory locks on the directory a model lives in, which pair a model with its external data.
//!
//! A save with an external data file publishes two files by two renames (the data, then the
//! model). Two saves to the same pair at once could interleave them and leave one save's model
//! beside the other's data; a load between the two renames could read the old model with the new
//! data. So a save publishes under an exclusive lock of the model's directory and a load opens
//! the model and maps its data files under a shared one: saves to one directory publish one
//! after the other, and a reader sees a pair as one save left it. Once mapped, a file stays the
//! reader's whatever is renamed over its name later.
//!
//! The locks are `flock(2)` on the directory itself (nothing is created in it), advisory: other
//! programs that write the same files do not take them. Where a directory cannot be opened or
//! locked (no permission to read it, a filesystem without `flock`), the operation goes on
//! unlocked, as it did before locks existed.

use std::fs::File;
use std::path::Path;

/// A held lock, released when dropped (closing the descriptor releases it).
#[derive(Debug)]
pub(super) struct DirLock(#[allow(dead_code)] Option<File>);

impl DirLock {
    /// A shared lock of `dir`: loads hold one while they open a model and its data.
    pub(super) fn shared(dir: &Path) -> DirLock {
        DirLock::take(dir, false)
    }

    /// An exclusive lock of `dir`: saves hold one while they rename their files into place.
    pub(super) fn exclusive(dir: &Path) -> DirLock {
        DirLock::take(dir, true)
    }

    #[cfg(unix)]
    fn take(dir: &Path, exclusive: bool) -> DirLock {
        use std::os::fd::AsRawFd;
        let Ok(file) = File::open(dir) else {
            return DirLock(None);
        };
        let op = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        loop {
            // SAFETY: `file` is an open descriptor for the lifetime of the call.
            if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
                return DirLock(Some(file));
            }
            if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return DirLock(None);
            }
        }
    }

    #[cfg(not(unix))]
    fn take(_: &Path, _: bool) -> DirLock {
        DirLock(None)
    }
}
