//! Hash maps and sets for the compile's own tables (op specs, fusion candidates, kernel
//! builders, the emitter's memos): the standard containers with foldhash's fast hasher
//! instead of SipHash, which was 5% of compiling GPT-2. The seed is random per process, as
//! the standard `RandomState`'s is, so iteration order is no more stable than before and
//! hostile graphs cannot aim at fixed collisions.

/// `std::collections::HashMap` with a fast seeded hasher (create with `default()`).
pub type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// `std::collections::HashSet` with a fast seeded hasher (create with `default()`).
pub type HashSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;
