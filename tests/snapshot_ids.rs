//! What instances restored from one snapshot make (AgentCore Runtime restores a session's microVM
//! from a snapshot of one already started; Lambda SnapStart does the same): two processes
//! forked from one that has already made ids, as start-up does, make different ones. Each
//! generator of per-request random values is tried (the turn id, the bits trace ids, span ids,
//! retry jitter and queue deduplication ids come from, the UUIDs other ids are): one that kept
//! its state in the process (a generator seeded once) would give both children the same values.

use agent_worker::protocol::{TurnId, fresh_random_bits};

/// What one process makes, as one line.
fn made() -> String {
    format!(
        "{} {:032x} {} {}",
        TurnId::random(),
        fresh_random_bits(),
        uuid::Uuid::new_v4(),
        uuid::Uuid::now_v7()
    )
}

/// What a child forked from this process makes, read through a pipe. The child only makes its
/// values, writes them and exits (`_exit`: nothing of the parent's is run again). The one
/// place of the tests that calls the kernel directly: a fork is what is tested.
#[allow(unsafe_code)]
fn made_by_a_fork() -> String {
    let mut fds = [0; 2];
    // SAFETY: a pipe made and read here alone; the child writes to it and exits at once.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0, "a pipe");
        let pid = libc::fork();
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let line = made();
            libc::write(fds[1], line.as_ptr().cast(), line.len());
            libc::_exit(0);
        }
        libc::close(fds[1]);
        let mut read = Vec::new();
        let mut buf = [0u8; 512];
        loop {
            let n = libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            read.extend_from_slice(&buf[..n as usize]);
        }
        libc::close(fds[0]);
        let mut status = 0;
        libc::waitpid(pid, &mut status, 0);
        String::from_utf8(read).unwrap()
    }
}

#[test]
fn two_processes_forked_from_one_started_make_different_ids() {
    // Start-up: each generator has made a value in this process before it is "snapshotted".
    let before = made();
    let (first, second) = (made_by_a_fork(), made_by_a_fork());
    assert_eq!(first.split(' ').count(), 4, "{first:?}");
    let first: Vec<&str> = first.split(' ').collect();
    let second: Vec<&str> = second.split(' ').collect();
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        assert_ne!(a, b, "value {i} is the same in both restored processes");
        assert_ne!(
            *a,
            before.split(' ').nth(i).unwrap(),
            "value {i} repeats the parent's"
        );
    }
}
