//! The allocator setting agentdesk makes at start-up (alone in its own test process, so that no
//! other test's allocations blur what the allocator reports).

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn freed_small_chunks_are_not_kept_in_fastbins() {
    agentdesk::tune_allocator();
    // More small chunks of one size than the per-thread cache keeps (7), freed: with fastbins
    // they would wait there unmerged until a larger allocation merged them all.
    let chunks: Vec<Box<[u8; 24]>> = (0..1000).map(|i| Box::new([i as u8; 24])).collect();
    drop(std::hint::black_box(chunks));
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let info = unsafe { libc::mallinfo2() };
    assert_eq!(info.fsmblks, 0, "bytes in fastbins");
}
