//! Type rules of builtin calls.

use super::*;

impl Checker<'_> {
    pub(super) fn store(
        &mut self,
        e: &Expr,
        args: &[Expr],
        kwargs: &[(String, Expr)],
    ) -> CResult<CStmt> {
        let a = self.bind_args(Builtin::Store, args, kwargs, e.span)?;
        let (Some(pe), Some(ve)) = (a[0], a[1]) else {
            return Err(self.error(e.span, "store needs a pointer and a value"));
        };
        let ptr = self.pointer(pe, "store")?;
        let Ty::Ptr(d, _) = ptr.ty.clone() else {
            return Err(self.error(pe.span, "store needs a pointer"));
        };
        let cv = self.expr(ve)?;
        if let Cv::Val(v) = &cv {
            if !matches!(v.ty, Ty::Tile(..)) {
                return Err(self.error(ve.span, format!("store: cannot store a {}", v.ty)));
            }
            self.fits("store: value", &v.ty, &ptr.ty, ve.span)?;
        }
        let value = self.to_dtype(cv, d, ve.span)?;
        let (mask, _) = self.mask_other("store", &ptr.ty, a[2], None)?;
        let site = self.site(e);
        Ok(CStmt::Store {
            ptr,
            value,
            mask: mask.map(|m| *m),
            site,
        })
    }

    /// `check(cond, mask)`: `cond` a bool tile or scalar, `mask` a bool tile that
    /// broadcasts with it.
    pub(super) fn check_call(
        &mut self,
        e: &Expr,
        args: &[Expr],
        kwargs: &[(String, Expr)],
    ) -> CResult<CStmt> {
        let a = self.bind_args(Builtin::Check, args, kwargs, e.span)?;
        let Some(ce) = a[0] else {
            return Err(self.error(e.span, "check needs a condition"));
        };
        let cv = self.expr(ce)?;
        let cond = self.to_dtype_checked(cv, DType::Bool, ce.span, "check: the condition")?;
        let mask = match a[1] {
            None => None,
            Some(me) => {
                let mv = self.expr(me)?;
                let m = self.to_dtype_checked(mv, DType::Bool, me.span, "check: the mask")?;
                let (Ty::Tile(_, cs), Ty::Tile(_, ms)) = (&cond.ty, &m.ty) else {
                    return Err(self.error(me.span, "check: the mask must be a tile"));
                };
                if broadcast_shapes(cs, ms).is_err() {
                    return Err(self.error(
                        me.span,
                        format!(
                            "check: the mask {} does not broadcast with the condition {}",
                            m.ty, cond.ty
                        ),
                    ));
                }
                Some(m)
            }
        };
        let site = self.site(e);
        let reason = self.comment_above.take();
        Ok(CStmt::Check {
            cond,
            mask,
            site,
            reason,
        })
    }

    pub(super) fn call(
        &mut self,
        e: &Expr,
        func: Builtin,
        args: &[Expr],
        kwargs: &[(String, Expr)],
    ) -> CResult<Cv> {
        let a = self.bind_args(func, args, kwargs, e.span)?;
        let arg = |i: usize| a[i].unwrap_or(e);
        let span = e.span;
        let unop = match func {
            Builtin::Exp => Some(UnOp::Exp),
            Builtin::Log => Some(UnOp::Log),
            Builtin::Sqrt => Some(UnOp::Sqrt),
            Builtin::Rsqrt => Some(UnOp::Rsqrt),
            Builtin::Tanh => Some(UnOp::Tanh),
            Builtin::Erf => Some(UnOp::Erf),
            Builtin::Erfc => Some(UnOp::Erfc),
            Builtin::Sigmoid => Some(UnOp::Sigmoid),
            Builtin::Sin => Some(UnOp::Sin),
            Builtin::Cos => Some(UnOp::Cos),
            Builtin::Floor => Some(UnOp::Floor),
            Builtin::Ceil => Some(UnOp::Ceil),
            Builtin::Abs => Some(UnOp::Abs),
            Builtin::Neg => Some(UnOp::Neg),
            Builtin::Relu => Some(UnOp::Relu),
            _ => None,
        };
        if let Some(op) = unop {
            let cv = self.expr(arg(0))?;
            let v = match cv {
                // A constant argument of a float function is a float.
                Cv::Const(c @ (Const::Int(_) | Const::Float(_)))
                    if !matches!(op, UnOp::Abs | UnOp::Neg | UnOp::Relu) =>
                {
                    self.lit(c, DType::F32, span)?
                }
                other => self.as_value(other, arg(0).span, "a tile")?,
            };
            return self.elementwise1(op, v, arg(0).span).map(Cv::Val);
        }
        let v = match func {
            Builtin::ProgramId | Builtin::NumPrograms => {
                let axis = self.const_int(arg(0), "the grid axis")?;
                let Ok(axis @ 0..=2) = usize::try_from(axis) else {
                    return Err(self.error(
                        arg(0).span,
                        format!("the grid has axes 0, 1 and 2, not {axis}"),
                    ));
                };
                let kind = if func == Builtin::ProgramId {
                    CKind::ProgramId(axis)
                } else {
                    CKind::NumPrograms(axis)
                };
                self.mk(kind, Ty::Tile(DType::I32, Vec::new()), span)?
            }
            Builtin::Arange => {
                let start = self.const_int(arg(0), "arange's start")?;
                let end = self.const_int(arg(1), "arange's end")?;
                if end <= start {
                    return Err(self.error(
                        span,
                        format!("arange({start}, {end}) is empty; end must exceed start"),
                    ));
                }
                if i32::try_from(start).is_err() || i32::try_from(end - 1).is_err() {
                    return Err(self.error(span, "arange values must fit in i32"));
                }
                let len = usize::try_from(end - start).unwrap_or(usize::MAX);
                self.mk(CKind::Arange(start), Ty::Tile(DType::I32, vec![len]), span)?
            }
            Builtin::Zeros | Builtin::Full => {
                let shape = self.shape_arg(arg(0))?;
                let (value, dt_arg) = if func == Builtin::Zeros {
                    (None, a[1])
                } else {
                    (Some(arg(1)), a[2])
                };
                let d = self.dtype_arg(dt_arg, DType::F32)?;
                let scalar = match value {
                    None => self.lit(Const::Int(0), d, span)?,
                    Some(ve) => {
                        let cv = self.expr(ve)?;
                        let v = self.to_dtype(cv, d, ve.span)?;
                        if !matches!(&v.ty, Ty::Tile(_, s) if s.is_empty()) {
                            return Err(self.error(
                                ve.span,
                                format!("full's value must be a scalar, got {}", v.ty),
                            ));
                        }
                        v
                    }
                };
                self.mk(CKind::Broadcast(b(scalar)), Ty::Tile(d, shape), span)?
            }
            Builtin::BroadcastTo => {
                let x = self.value(arg(0), "a tile")?;
                let shape = self.shape_arg(arg(1))?;
                let ty = match &x.ty {
                    Ty::Tile(d, _) => Ty::Tile(*d, shape.clone()),
                    Ty::Ptr(d, _) => Ty::Ptr(*d, shape.clone()),
                    other => return Err(self.error(span, format!("cannot broadcast a {other}"))),
                };
                let (Ty::Tile(_, s) | Ty::Ptr(_, s)) = &x.ty else {
                    return Err(self.error(span, "cannot broadcast"));
                };
                if broadcast_shapes(s, &shape).ok().as_ref() != Some(&shape) {
                    return Err(self.error(
                        span,
                        format!("{} does not broadcast to {}", x.ty, ShapeDisplay(&shape)),
                    ));
                }
                self.mk(CKind::Broadcast(b(x)), ty, span)?
            }
            Builtin::Load => {
                let ptr = self.pointer(arg(0), "load")?;
                let (mask, other) = self.mask_other("load", &ptr.ty, a[1], a[2])?;
                let Ty::Ptr(d, shape) = ptr.ty.clone() else {
                    return Err(self.error(span, "load needs a pointer"));
                };
                let site = self.site(e);
                self.mk(
                    CKind::Load {
                        ptr: b(ptr),
                        mask,
                        other,
                        site,
                    },
                    Ty::Tile(d, shape),
                    span,
                )?
            }
            Builtin::Dot => {
                let x = self.value(arg(0), "a tile")?;
                let y = self.value(arg(1), "a tile")?;
                let (Ty::Tile(dx, sx), Ty::Tile(dy, sy)) = (&x.ty, &y.ty) else {
                    return Err(self.error(
                        span,
                        format!("dot needs two tiles, got {} and {}", x.ty, y.ty),
                    ));
                };
                if sx.len() != 2 || sy.len() != 2 {
                    return Err(self.error(
                        span,
                        format!("dot needs 2-D tiles, got {} and {}", x.ty, y.ty),
                    ));
                }
                if sx[1] != sy[0] {
                    return Err(self.error(
                        span,
                        format!(
                            "dot: inner extents differ: {} @ {} ({} vs {})",
                            x.ty, y.ty, sx[1], sy[0]
                        ),
                    ));
                }
                let acc_dtype = crate::tile::dot_dtype(*dx).filter(|_| dx == dy);
                let Some(acc_dtype) = acc_dtype else {
                    return Err(self.error(
                        span,
                        format!(
                            "dot needs two numeric tiles of one dtype, got {} and {}",
                            x.ty, y.ty
                        ),
                    ));
                };
                let out = Ty::Tile(acc_dtype, vec![sx[0], sy[1]]);
                let acc = match a[2] {
                    None => None,
                    Some(ae) => {
                        let acc = self.value(ae, "an accumulator")?;
                        if acc.ty != out {
                            return Err(self.error(
                                ae.span,
                                format!("dot: the accumulator must be {out}, got {}", acc.ty),
                            ));
                        }
                        Some(b(acc))
                    }
                };
                self.mk(CKind::Dot(b(x), b(y), acc), out, span)?
            }
            Builtin::Sum | Builtin::Max | Builtin::Min => {
                let x = self.value(arg(0), "a tile")?;
                let Ty::Tile(d, shape) = x.ty.clone() else {
                    return Err(
                        self.error(span, format!("{} needs a tile, got {}", func.name(), x.ty))
                    );
                };
                if d == DType::Bool {
                    return Err(self.error(
                        span,
                        format!("{} of a bool tile: cast it to a number first", func.name()),
                    ));
                }
                let axis = match a[1] {
                    None => None,
                    Some(ae) => {
                        let ax = self.const_int(ae, "the axis")?;
                        Some(normalize_axis(ax, shape.len()).map_err(|m| self.error(ae.span, m))?)
                    }
                };
                let out: Vec<usize> = match axis {
                    Some(ax) if !shape.is_empty() => shape
                        .iter()
                        .enumerate()
                        .filter(|&(i, _)| i != ax)
                        .map(|(_, &s)| s)
                        .collect(),
                    _ => Vec::new(),
                };
                let op = match func {
                    Builtin::Sum => ReduceOp::Sum,
                    Builtin::Max => ReduceOp::Max,
                    _ => ReduceOp::Min,
                };
                let axis = axis.filter(|_| !shape.is_empty());
                self.mk(CKind::Reduce(op, b(x), axis), Ty::Tile(d, out), span)?
            }
            Builtin::Maximum | Builtin::Minimum => {
                let (l, r) = (self.expr(arg(0))?, self.expr(arg(1))?);
                if let (Cv::Const(_), Cv::Const(_)) = (&l, &r) {
                    return Err(self.error(
                        span,
                        format!("{} of two constants: write the value", func.name()),
                    ));
                }
                let op = if func == Builtin::Maximum {
                    BinOp::Max
                } else {
                    BinOp::Min
                };
                self.elementwise2(op, func.name(), l, r, span)?
            }
            Builtin::Pow => {
                let (l, r) = (self.expr(arg(0))?, self.expr(arg(1))?);
                let v = self.elementwise2(BinOp::Pow, "pow", l, r, span)?;
                if !matches!(&v.ty, Ty::Tile(d, _) if d.is_float()) {
                    return Err(self.error(
                        span,
                        format!("`pow` needs float operands, got {} (cast first)", v.ty),
                    ));
                }
                v
            }
            Builtin::Where => {
                let cv = self.expr(arg(0))?;
                let c = self.to_dtype_checked(cv, DType::Bool, arg(0).span, "where's condition")?;
                let (x, y) = (self.expr(arg(1))?, self.expr(arg(2))?);
                let (x, y) = self.unify(x, y, span)?;
                let (Ty::Tile(_, cs), Ty::Tile(d, xs), Ty::Tile(_, ys)) = (&c.ty, &x.ty, &y.ty)
                else {
                    return Err(self.error(span, "where needs tiles"));
                };
                let shape = self.broadcast(cs, xs, span)?;
                let shape = self.broadcast(&shape, ys, span)?;
                let ty = Ty::Tile(*d, shape);
                self.mk(CKind::Where(b(c), b(x), b(y)), ty, span)?
            }
            Builtin::Cast => {
                let d = self.dtype_arg(a[1], DType::F32)?;
                let cv = self.expr(arg(0))?;
                if let Cv::Val(v) = &cv {
                    if !matches!(v.ty, Ty::Tile(..)) {
                        return Err(self.error(span, format!("cannot cast a {}", v.ty)));
                    }
                }
                let v = self.as_value(cv, arg(0).span, "a tile")?;
                cast(v, d)
            }
            Builtin::Trans => {
                let x = self.value(arg(0), "a tile")?;
                let Ty::Tile(d, s) = &x.ty else {
                    return Err(self.error(span, format!("trans needs a tile, got {}", x.ty)));
                };
                if s.len() != 2 {
                    return Err(self.error(span, format!("trans needs a 2-D tile, got {}", x.ty)));
                }
                let ty = Ty::Tile(*d, vec![s[1], s[0]]);
                self.mk(CKind::Trans(b(x)), ty, span)?
            }
            Builtin::LocalAlloc => {
                let shape = self.shape_arg(arg(0))?;
                let d = self.dtype_arg(a[1], DType::F32)?;
                let site = Site {
                    text: print_expr(e),
                    span,
                    location: None,
                };
                self.allocs.push(Alloc {
                    dtype: d,
                    shape: shape.clone(),
                    site,
                });
                self.mk(
                    CKind::LocalAlloc(self.allocs.len() - 1),
                    Ty::Local(d, shape),
                    span,
                )?
            }
            Builtin::DmaAsync => {
                let buf = self.value(arg(0), "a local buffer")?;
                let Ty::Local(bd, bs) = buf.ty.clone() else {
                    return Err(self.error(
                        arg(0).span,
                        format!(
                            "dma_async copies into a local buffer (local_alloc), got {}",
                            buf.ty
                        ),
                    ));
                };
                let ptr = self.pointer(arg(1), "dma_async")?;
                let Ty::Ptr(pd, ps) = ptr.ty.clone() else {
                    return Err(self.error(span, "dma_async needs a pointer"));
                };
                if pd != bd || ps != bs {
                    return Err(self.error(
                        arg(1).span,
                        format!(
                            "dma_async copies element for element: the {} must match the {}",
                            ptr.ty, buf.ty
                        ),
                    ));
                }
                let (mask, other) = self.mask_other("dma_async", &buf.ty, a[2], a[3])?;
                let site = self.site(e);
                self.mk(
                    CKind::DmaAsync {
                        buf: b(buf),
                        ptr: b(ptr),
                        mask,
                        other,
                        site,
                    },
                    Ty::Token,
                    span,
                )?
            }
            Builtin::LocalLoad => {
                let buf = self.value(arg(0), "a local buffer")?;
                let Ty::Local(d, s) = buf.ty.clone() else {
                    return Err(self.error(
                        arg(0).span,
                        format!(
                            "local_load reads a local buffer (local_alloc), got {}",
                            buf.ty
                        ),
                    ));
                };
                let site = self.site(e);
                self.mk(CKind::LocalLoad { buf: b(buf), site }, Ty::Tile(d, s), span)?
            }
            Builtin::Store | Builtin::DmaWait | Builtin::Check => {
                return Err(self.error(
                    span,
                    format!("`{}` returns nothing; call it as a statement", func.name()),
                ))
            }
            _ => return Err(self.error(span, format!("`{}` cannot be used here", func.name()))),
        };
        Ok(Cv::Val(v))
    }
}
