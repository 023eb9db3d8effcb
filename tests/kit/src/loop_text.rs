//! Loop-IR text round trips: a program printed and read back must print the same and
//! be the same program (up to the order of block nodes the text leaves open).

use ferrite_ir::loops::{parse_program, Block, ExprRef, Program, Stage};

/// Prints `p`, reads the text back and checks that the program read prints the same
/// text and equals `p` once both have their block nodes in one canonical order (the
/// text does not number nodes written inline). Returns the program read.
pub fn check_round_trip(p: &Program) -> Result<Program, String> {
    let text = p.to_string();
    let q = parse_program("printed.loop", &text)
        .map_err(|d| format!("the printed program does not read back:\n{d}\n\n{text}"))?;
    let again = q.to_string();
    if again != text {
        return Err(format!(
            "the program read prints differently (- printed, + reprinted):\n{}\n{text}",
            crate::diff(&text, &again)
        ));
    }
    let (a, b) = (canonical(p), canonical(&q));
    if a != b {
        let detail = a
            .kernels
            .iter()
            .zip(&b.kernels)
            .find(|(x, y)| x != y)
            .map(|(x, y)| format!("original: {x:#?}\nread: {y:#?}"))
            .unwrap_or_else(|| format!("original: {a:#?}\nread: {b:#?}"));
        return Err(format!(
            "the program read differs from the original:\n{detail}\n{text}"
        ));
    }
    Ok(q)
}

/// `p` with every block's nodes renumbered in depth-first post-order from the stage's
/// roots (operands in order), so that two programs that differ only in the order of
/// independent nodes compare equal.
pub fn canonical(p: &Program) -> Program {
    let mut p = p.clone();
    for k in &mut p.kernels {
        for stage in &mut k.stages {
            let roots = stage.roots();
            let map = match stage {
                Stage::Reduce { body, .. } | Stage::Store { body, .. } => reorder(body, &roots),
            };
            let m = |r: ExprRef| map.get(r.index()).copied().flatten().unwrap_or(r);
            match stage {
                Stage::Reduce { reductions, .. } => {
                    for r in reductions {
                        r.value = m(r.value);
                        r.rhs = r.rhs.map(m);
                    }
                }
                Stage::Store { stores, .. } => {
                    for s in stores {
                        s.value = m(s.value);
                        s.index = s.index.map_refs(&m);
                    }
                }
            }
        }
    }
    p
}

/// Reorders `body` in post-order from `roots`; returns the old-to-new map. Nodes no
/// root reaches are kept after the others, in their order.
fn reorder(body: &mut Block, roots: &[ExprRef]) -> Vec<Option<ExprRef>> {
    fn visit(body: &Block, r: ExprRef, seen: &mut [bool], order: &mut Vec<usize>) {
        let i = r.index();
        if i >= seen.len() || seen[i] {
            return;
        }
        seen[i] = true;
        body.nodes[i].for_each_operand(&mut |o| visit(body, o, seen, order));
        order.push(i);
    }
    let mut seen = vec![false; body.nodes.len()];
    let mut order = Vec::new();
    for &r in roots {
        visit(body, r, &mut seen, &mut order);
    }
    for i in 0..body.nodes.len() {
        visit(body, ExprRef(i as u32), &mut seen, &mut order);
    }
    let mut map = vec![None; body.nodes.len()];
    for (new, &old) in order.iter().enumerate() {
        map[old] = Some(ExprRef(new as u32));
    }
    let m = |r: ExprRef| map.get(r.index()).copied().flatten().unwrap_or(r);
    body.nodes = order.iter().map(|&i| body.nodes[i].map_refs(&m)).collect();
    map
}
