//! The bounds-checked walk over a program's execution plans, with a work budget.

use super::fb::{Budget, Table};
use super::report::{blob_magic, summarize};
use std::collections::BTreeMap;

use super::error::{PteError, PteLimits};
use super::report::*;

pub(super) struct Reader<'l> {
    pub(super) limits: &'l PteLimits,
    pub(super) budget: Budget,
    pub(super) instructions: u64,
}

// Union tags of `InstructionArguments`.
const KERNEL_CALL: u8 = 1;
const DELEGATE_CALL: u8 = 2;

impl Reader<'_> {
    pub(super) fn entries(&self, n: usize) -> Result<(), PteError> {
        if n > self.limits.max_entries {
            return Err(PteError::LimitExceeded {
                what: "segments or named data entries",
                limit: self.limits.max_entries as u64,
            });
        }
        Ok(())
    }

    pub(super) fn method<'a>(
        &mut self,
        plan: &Table<'a>,
        inline_data: &[&'a [u8]],
        segment_bytes: &dyn Fn(u32) -> Option<(u64, Option<&'a [u8]>)>,
    ) -> Result<MethodReport, PteError> {
        let max_string = self.limits.max_string;
        let name = plan
            .string(0, max_string, &mut self.budget)?
            .unwrap_or("")
            .to_string();
        // Values: their count, and the names of tensors whose data lives outside the file
        // (EValue union type 5 = Tensor; Tensor field 9 = extra_tensor_info, whose field 2 is
        // the location, 1 = EXTERNAL, and field 1 the fully qualified name).
        let (values, mut external_tensors, mut external_layouts) = self.values(plan)?;
        external_tensors.sort();
        external_layouts.sort_by(|a: &ExternalTensor, b: &ExternalTensor| a.name.cmp(&b.name));
        let inputs = plan.vector(3, 4, &mut self.budget)?.map_or(0, |v| v.len);
        let outputs = plan.vector(4, 4, &mut self.budget)?.map_or(0, |v| v.len);
        let signature = Signature {
            inputs: self.io(plan, 3)?,
            outputs: self.io(plan, 4)?,
        };
        let operators = self.operators(plan)?;
        let delegates = self.delegates(plan, inline_data, segment_bytes)?;
        let Calls {
            delegate_calls,
            kernel_calls,
            other_instructions,
            instructions,
            chains: chain_count,
        } = self.calls(plan, &operators, &delegates)?;
        let summary = summarize(&delegate_calls, &kernel_calls);
        let delegate_data_bytes = delegates.iter().filter_map(|d| d.size).sum();
        Ok(MethodReport {
            name,
            inputs,
            outputs,
            values,
            chains: chain_count,
            instructions,
            operators: operators.len(),
            delegates,
            delegate_calls,
            kernel_calls,
            other_instructions,
            delegate_data_bytes,
            summary,
            external_tensors,
            external_layouts,
            signature,
        })
    }

    /// The values a method's `inputs` (field 3) or `outputs` (field 4) name, described.
    fn io(&mut self, plan: &Table<'_>, field: usize) -> Result<Vec<TensorSpec>, PteError> {
        let Some(idx) = plan.vector(field, 4, &mut self.budget)? else {
            return Ok(Vec::new());
        };
        self.entries(idx.len)?;
        let Some(vals) = plan.vector(2, 4, &mut self.budget)? else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(idx.len);
        for c in idx.raw()?.chunks_exact(4) {
            let i = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            // A negative or out-of-range index is a malformed program (the vector says so).
            let v = vals.table(usize::try_from(i).unwrap_or(usize::MAX), &mut self.budget)?;
            // EValue: field 0 the union type, field 1 the value (5 = Tensor).
            let kind = v.u8(0, 0)?;
            let spec = match (kind, v.table(1, &mut self.budget)?) {
                (5, Some(t)) => {
                    let shape = match t.vector(2, 4, &mut self.budget)? {
                        Some(s) => s
                            .raw()?
                            .chunks_exact(4)
                            .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                            .collect(),
                        None => Vec::new(),
                    };
                    let dim_order = match t.vector(3, 1, &mut self.budget)? {
                        Some(d) => d.raw()?.to_vec(),
                        None => Vec::new(),
                    };
                    TensorSpec {
                        dtype: super::ptd::scalar_type_name(t.u8(0, 0)? as i8).to_string(),
                        shape,
                        dim_order,
                        dynamism: match t.u8(8, 0)? {
                            0 => Dynamism::Static,
                            1 => Dynamism::Bounded,
                            _ => Dynamism::Unbounded,
                        },
                    }
                }
                (k, _) => TensorSpec {
                    dtype: match k {
                        1 => "none",
                        2 => "int",
                        3 => "bool",
                        4 => "double",
                        6 => "string",
                        7 => "int_list",
                        8 => "double_list",
                        9 => "bool_list",
                        10 => "tensor_list",
                        11 => "optional_tensor_list",
                        _ => "unknown",
                    }
                    .to_string(),
                    shape: Vec::new(),
                    dim_order: Vec::new(),
                    dynamism: Dynamism::Static,
                },
            };
            out.push(spec);
        }
        Ok(out)
    }
    /// The method's value count, and the names and layouts of the tensors whose data lives
    /// outside the file.
    fn values(
        &mut self,
        plan: &Table<'_>,
    ) -> Result<(usize, Vec<String>, Vec<ExternalTensor>), PteError> {
        let max_string = self.limits.max_string;
        let mut external_tensors = Vec::new();
        let mut external_layouts = Vec::new();
        let values = match plan.vector(2, 4, &mut self.budget)? {
            Some(vals) => {
                // Each value read is charged to the work budget.
                for i in 0..vals.len {
                    let v = vals.table(i, &mut self.budget)?;
                    if v.u8(0, 0)? != 5 {
                        continue;
                    }
                    let Some(t) = v.table(1, &mut self.budget)? else {
                        continue;
                    };
                    let Some(extra) = t.table(9, &mut self.budget)? else {
                        continue;
                    };
                    if extra.u8(2, 0)? == 1 {
                        let fqn = extra
                            .string(1, max_string, &mut self.budget)?
                            .unwrap_or("")
                            .to_string();
                        // Tensor field 0 is the scalar type, field 2 the sizes.
                        let sizes = match t.vector(2, 4, &mut self.budget)? {
                            Some(v) => v
                                .raw()?
                                .chunks_exact(4)
                                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                                .collect(),
                            None => Vec::new(),
                        };
                        external_layouts.push(ExternalTensor {
                            name: fqn.clone(),
                            scalar_type: t.u8(0, 0)? as i8,
                            sizes,
                        });
                        external_tensors.push(fqn);
                    }
                }
                vals.len
            }
            None => 0,
        };
        Ok((values, external_tensors, external_layouts))
    }

    /// The method's operator names (`name.overload`).
    fn operators(&mut self, plan: &Table<'_>) -> Result<Vec<String>, PteError> {
        let max_string = self.limits.max_string;
        let mut operators = Vec::new();
        if let Some(ops) = plan.vector(6, 4, &mut self.budget)? {
            if ops.len > self.limits.max_operators {
                return Err(PteError::LimitExceeded {
                    what: "operators in one method",
                    limit: self.limits.max_operators as u64,
                });
            }
            for i in 0..ops.len {
                let op = ops.table(i, &mut self.budget)?;
                let n = op.string(0, max_string, &mut self.budget)?.unwrap_or("");
                let overload = op.string(1, max_string, &mut self.budget)?.unwrap_or("");
                operators.push(if overload.is_empty() {
                    n.to_string()
                } else {
                    format!("{n}.{overload}")
                });
            }
        }

        Ok(operators)
    }

    /// The method's delegates: backend, where its data is, its size and magic, compile specs.
    fn delegates<'a>(
        &mut self,
        plan: &Table<'a>,
        inline_data: &[&'a [u8]],
        segment_bytes: &dyn Fn(u32) -> Option<(u64, Option<&'a [u8]>)>,
    ) -> Result<Vec<DelegateInfo>, PteError> {
        let max_string = self.limits.max_string;
        let mut delegates = Vec::new();
        if let Some(ds) = plan.vector(7, 4, &mut self.budget)? {
            if ds.len > self.limits.max_delegates {
                return Err(PteError::LimitExceeded {
                    what: "delegates in one method",
                    limit: self.limits.max_delegates as u64,
                });
            }
            for i in 0..ds.len {
                let d = ds.table(i, &mut self.budget)?;
                let backend = d
                    .string(0, max_string, &mut self.budget)?
                    .unwrap_or("")
                    .to_string();
                let (location, index) = match d.table(1, &mut self.budget)? {
                    Some(r) => (r.u8(0, 0)?, r.u32(1, 0)?),
                    None => (0, 0),
                };
                let (location, size, head) = match location {
                    0 => {
                        let data = inline_data.get(index as usize);
                        (
                            DataLocation::Inline,
                            data.map(|d| d.len() as u64),
                            data.and_then(|d| d.get(..8)),
                        )
                    }
                    1 => {
                        let seg = segment_bytes(index);
                        (
                            DataLocation::Segment,
                            seg.map(|s| s.0),
                            seg.and_then(|s| s.1),
                        )
                    }
                    _ => {
                        return Err(PteError::Malformed {
                            offset: 0,
                            why: "delegate data location is neither inline nor segment",
                        });
                    }
                };
                let magic = head.and_then(blob_magic);
                let mut compile_specs = Vec::new();
                if let Some(specs) = d.vector(2, 4, &mut self.budget)? {
                    for j in 0..specs.len {
                        let spec = specs.table(j, &mut self.budget)?;
                        if let Some(k) = spec.string(0, max_string, &mut self.budget)? {
                            compile_specs.push(k.to_string());
                        }
                    }
                }
                delegates.push(DelegateInfo {
                    backend,
                    location,
                    index,
                    size,
                    magic,
                    compile_specs,
                });
            }
        }

        Ok(delegates)
    }

    /// What the method's instructions call: delegates per backend, kernels per operator.
    fn calls(
        &mut self,
        plan: &Table<'_>,
        operators: &[String],
        delegates: &[DelegateInfo],
    ) -> Result<Calls, PteError> {
        let mut delegate_calls = BTreeMap::new();
        let mut kernel_calls = BTreeMap::new();
        let mut other_instructions = 0u64;
        let mut instructions = 0u64;
        let mut chain_count = 0usize;
        if let Some(chains) = plan.vector(5, 4, &mut self.budget)? {
            chain_count = chains.len;
            for c in 0..chains.len {
                let chain = chains.table(c, &mut self.budget)?;
                let Some(instrs) = chain.vector(2, 4, &mut self.budget)? else {
                    continue;
                };
                self.instructions = self.instructions.saturating_add(instrs.len as u64);
                if self.instructions > self.limits.max_instructions {
                    return Err(PteError::LimitExceeded {
                        what: "instructions",
                        limit: self.limits.max_instructions,
                    });
                }
                instructions += instrs.len as u64;
                for k in 0..instrs.len {
                    let ins = instrs.table(k, &mut self.budget)?;
                    let tag = ins.u8(0, 0)?;
                    match tag {
                        KERNEL_CALL | DELEGATE_CALL => {
                            let Some(args) = ins.table(1, &mut self.budget)? else {
                                return Err(PteError::Malformed {
                                    offset: 0,
                                    why: "instruction has a type but no arguments",
                                });
                            };
                            let index = args.i32(0, 0)?;
                            if tag == KERNEL_CALL {
                                let op = usize::try_from(index)
                                    .ok()
                                    .and_then(|i| operators.get(i))
                                    .ok_or(PteError::Malformed {
                                        offset: 0,
                                        why: "kernel call names an operator that does not exist",
                                    })?;
                                *kernel_calls.entry(op.clone()).or_insert(0u64) += 1;
                            } else {
                                let d = usize::try_from(index)
                                    .ok()
                                    .and_then(|i| delegates.get(i))
                                    .ok_or(PteError::Malformed {
                                        offset: 0,
                                        why: "delegate call names a delegate that does not exist",
                                    })?;
                                *delegate_calls.entry(d.backend.clone()).or_insert(0u64) += 1;
                            }
                        }
                        3..=5 => other_instructions += 1,
                        _ => {
                            return Err(PteError::Malformed {
                                offset: 0,
                                why: "unknown instruction type",
                            });
                        }
                    }
                }
            }
        }
        Ok(Calls {
            delegate_calls,
            kernel_calls,
            other_instructions,
            instructions,
            chains: chain_count,
        })
    }
}

/// What one method's instructions call.
struct Calls {
    delegate_calls: BTreeMap<String, u64>,
    kernel_calls: BTreeMap<String, u64>,
    other_instructions: u64,
    instructions: u64,
    chains: usize,
}
