//! "Did you mean": edit distances and the closest known name to a misspelled one.

/// How many edits a suggestion for `name` may be away.
pub(crate) fn threshold(name: &str) -> usize {
    if name.chars().count() <= 3 {
        1
    } else {
        2
    }
}

/// The candidate closest to `name` within [`threshold`] edits; ties go to the
/// first candidate.
pub(crate) fn closest<'c>(
    name: &str,
    candidates: impl Iterator<Item = &'c str>,
) -> Option<&'c str> {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        let d = edit_distance(name, c);
        if d > 0 && d <= threshold(name) && best.is_none_or(|(bd, _)| d < bd) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

/// Levenshtein distance, in chars. Long names (which only hostile input has)
/// count as far from everything, keeping suggestions cheap.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    // Checked before anything is copied: a name of megabytes costs nothing.
    if a.chars().nth(64).is_some() || b.chars().nth(64).is_some() {
        return usize::MAX;
    }
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let subst = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            cur[j] = subst.min(prev[j] + 1).min(cur[j - 1] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("relu6", "relu"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("axes", "axis"), 1);
        let names = ["neg", "relu", "exp"];
        assert_eq!(closest("relu6", names.into_iter()), Some("relu"));
        assert_eq!(closest("frobnicate", names.into_iter()), None);
    }
}
