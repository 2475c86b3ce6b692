//! Gradients of a loss at chosen positions, with the two memory savers the memory plan
//! ([`crate::memory`]) chooses between: the loss over the vocabulary in chunks of rows, and
//! activation checkpointing (each block recomputed from its saved input during the backward
//! pass). Both give the values of one backward pass over the whole graph; the parity tests run
//! with and without them against the same PyTorch fixtures.

use std::collections::HashMap;
use std::ops::Range;

use candle_core::{DType, Tensor, Var};

use crate::TrainError;
use crate::lora::Lora;
use crate::model::{BlockInputs, Checkpointing, LossRows, TrainModel};
use rand::rngs::StdRng;

impl TrainModel {
    /// Activation checkpointing for [`TrainModel::loss_grads`] (off by default): the memory
    /// plan ([`crate::memory`]) turns it on when activations would not fit.
    pub fn set_checkpointing(&mut self, c: Checkpointing) {
        self.checkpointing = c;
    }

    pub fn checkpointing(&self) -> Checkpointing {
        self.checkpointing
    }

    /// [`Checkpointing::Auto`] for a run whose batch shapes vary (RL episodes): the activation
    /// budget is `budget` (by default the memory available now) less this model's
    /// [`memory::fixed_bytes`](crate::memory::fixed_bytes) with `weight_copies` more copies
    /// of the weights (RL's merged sampling copy, a reference model).
    pub fn auto_checkpointing(&self, budget: Option<u64>, weight_copies: u64) -> Checkpointing {
        let Some(budget) = budget.or_else(crate::memory::default_budget) else {
            return Checkpointing::Off;
        };
        let fixed = crate::memory::fixed_bytes(
            self.num_params() as u64,
            self.num_trainable() as u64,
            self.lora.is_some(),
            weight_copies,
        );
        Checkpointing::Auto {
            activation_budget: budget.saturating_sub(fixed),
        }
    }

    /// Rows of logits a separable loss computes at once (default
    /// [`crate::memory::head_chunk_rows`]; smaller saves memory, larger saves nothing).
    pub fn set_logit_chunk_rows(&mut self, rows: usize) {
        self.logit_chunk_rows = rows.max(1);
    }

    /// The gradients of `loss` at the logits of the flattened positions `rows` (`bi * t + p`,
    /// u32), added into `grads` by parameter name as [`TrainModel::accumulate_grads`] does;
    /// returns the loss, detached. `train` turns LoRA dropout on.
    ///
    /// `loss` maps the `(n, vocab)` logits of the rows `range` of `rows` to a scalar. With
    /// [`LossRows::Separable`] it is called on chunks of rows and the results are summed (a sum
    /// over rows, such as the SFT cross-entropy), so that no more than a chunk of logits and
    /// their log-softmax exists at once (for SmolLM2's 49K vocabulary, 0.8 GB a 1,000 rows
    /// each); with [`LossRows::Whole`] it is called once on every row (RL's loss, normalised
    /// over the whole batch).
    ///
    /// How: the hidden states after the last block become a leaf; each chunk's loss is
    /// back-propagated to the head's weights and to that leaf, and the leaf's summed gradient
    /// is then back-propagated through the blocks, in one pass or, with activation
    /// checkpointing ([`TrainModel::set_checkpointing`]), block by block from the last
    /// (recomputing each block's forward from its saved input, so that at most one block's
    /// graph is alive; LoRA dropout draws the same masks again). The values are those of
    /// `loss(...).backward()` on the whole graph.
    pub fn loss_grads(
        &self,
        ids: &Tensor,
        rows: &Tensor,
        train: bool,
        mode: LossRows,
        mut loss: impl FnMut(&Tensor, Range<usize>) -> candle_core::Result<Tensor>,
        grads: &mut HashMap<String, Tensor>,
    ) -> Result<Tensor, TrainError> {
        let n_rows = rows.dim(0)?;
        let chunk = match mode {
            LossRows::Separable => self.logit_chunk_rows,
            LossRows::Whole => n_rows,
        }
        .max(1);
        let checkpointing = self.wants_checkpointing(ids, chunk.min(n_rows))?;
        let ctx = self.block_inputs(ids)?;
        let fwd = self.forward_blocks(ids, &ctx, train, checkpointing)?;
        let (total, dtop) = self.head_grads(&fwd.top, rows, chunk, &mut loss, grads)?;
        let Some(g) = dtop else {
            return Ok(total);
        };
        if !checkpointing {
            // One pass through the graph the forward built.
            let surrogate = (fwd.top * g)?.sum_all()?;
            self.accumulate_grads(&surrogate.backward()?, grads)?;
            return Ok(total);
        }
        self.backward_blocks(ids, &ctx, train, fwd, g, grads)?;
        Ok(total)
    }

    /// Whether this batch runs with activation checkpointing: as set, or under
    /// [`Checkpointing::Auto`] when its activations (with `logit_rows` rows of logits at once)
    /// would not fit the budget.
    fn wants_checkpointing(&self, ids: &Tensor, logit_rows: usize) -> Result<bool, TrainError> {
        Ok(match self.checkpointing {
            Checkpointing::Off => false,
            Checkpointing::On => true,
            Checkpointing::Auto { activation_budget } => {
                let (b, t) = ids.dims2()?;
                let shape = crate::memory::BatchShape {
                    rows: b,
                    len: t,
                    logit_rows,
                };
                crate::memory::needs_checkpointing(&self.config, shape, activation_budget)
            }
        })
    }

    /// The forward pass through every block. With checkpointing each block's input is
    /// detached and kept with the dropout state it started from, so that the backward pass
    /// can recompute it; without, `top` carries the whole graph.
    fn forward_blocks(
        &self,
        ids: &Tensor,
        ctx: &BlockInputs,
        train: bool,
        checkpointing: bool,
    ) -> Result<BlockForward, TrainError> {
        let mut inputs = Vec::new();
        let mut rng = Vec::new();
        let mut x = self.embed(ids)?;
        if checkpointing {
            x = x.detach();
        }
        for i in 0..self.config.num_layers {
            if checkpointing {
                rng.push(self.lora.as_ref().map(Lora::dropout_state));
                let y = self.block(i, &x, ctx, train)?.detach();
                inputs.push(x);
                x = y;
            } else {
                x = self.block(i, &x, ctx, train)?;
            }
        }
        Ok(BlockForward {
            top: x,
            inputs,
            rng,
            rng_after: self.lora.as_ref().map(Lora::dropout_state),
        })
    }

    /// The head and the loss, `chunk` rows at a time, on the last hidden states as a leaf:
    /// the head's gradients go into `grads`; returns the summed loss (detached) and the
    /// leaf's summed gradient (`None` when no loss reaches it).
    fn head_grads(
        &self,
        top: &Tensor,
        rows: &Tensor,
        chunk: usize,
        loss: &mut impl FnMut(&Tensor, Range<usize>) -> candle_core::Result<Tensor>,
        grads: &mut HashMap<String, Tensor>,
    ) -> Result<(Tensor, Option<Tensor>), TrainError> {
        let n_rows = rows.dim(0)?;
        let top = Var::from_tensor(&top.detach())?;
        let mut total: Option<Tensor> = None;
        let mut dtop: Option<Tensor> = None;
        let mut start = 0;
        while start < n_rows {
            let len = chunk.min(n_rows - start);
            let l = loss(
                &self.head_rows(top.as_tensor(), &rows.narrow(0, start, len)?)?,
                start..start + len,
            )?;
            let store = l.backward()?;
            self.accumulate_grads(&store, grads)?;
            if let Some(g) = store.get(top.as_tensor()) {
                dtop = Some(match dtop {
                    Some(acc) => (acc + g)?,
                    None => g.clone(),
                });
            }
            let l = l.detach();
            total = Some(match total {
                Some(acc) => (acc + l)?,
                None => l,
            });
            start += len;
        }
        let total = match total {
            Some(t) => t,
            None => Tensor::zeros((), DType::F32, &self.device)?,
        };
        Ok((total, dtop))
    }

    /// With checkpointing: `g`, the gradient at the last hidden states, back through the
    /// blocks from the last, each recomputed from its saved input with its dropout state (at
    /// most one block's graph alive), then into the embedding unless LoRA freezes it.
    fn backward_blocks(
        &self,
        ids: &Tensor,
        ctx: &BlockInputs,
        train: bool,
        fwd: BlockForward,
        mut g: Tensor,
        grads: &mut HashMap<String, Tensor>,
    ) -> Result<(), TrainError> {
        let BlockForward {
            top,
            mut inputs,
            rng,
            rng_after,
        } = fwd;
        drop(top);
        for i in (0..self.config.num_layers).rev() {
            let input = inputs.pop().expect("one input per block");
            if let (Some(lora), Some(Some(state))) = (&self.lora, rng.get(i)) {
                lora.set_dropout_state(state.clone());
            }
            let xv = Var::from_tensor(&input)?;
            drop(input);
            let surrogate = (self.block(i, xv.as_tensor(), ctx, train)? * &g)?.sum_all()?;
            let store = surrogate.backward()?;
            self.accumulate_grads(&store, grads)?;
            let dx = store.get(xv.as_tensor()).cloned();
            match dx {
                Some(dx) => g = dx,
                None => {
                    // Nothing flows further down: the embedding gets no gradient either.
                    if let (Some(lora), Some(state)) = (&self.lora, rng_after) {
                        lora.set_dropout_state(state);
                    }
                    return Ok(());
                }
            }
        }
        if let (Some(lora), Some(state)) = (&self.lora, rng_after) {
            lora.set_dropout_state(state);
        }
        // The embedding matrix is trained unless LoRA freezes it.
        if self.lora.is_none() {
            let surrogate = (self.embed(ids)? * g)?.sum_all()?;
            self.accumulate_grads(&surrogate.backward()?, grads)?;
        }
        Ok(())
    }
}

/// What [`TrainModel::forward_blocks`] leaves for the backward pass.
struct BlockForward {
    /// The hidden states after the last block (detached under checkpointing).
    top: Tensor,
    /// Under checkpointing: each block's input, detached.
    inputs: Vec<Tensor>,
    /// Under checkpointing: the LoRA dropout state each block started from.
    rng: Vec<Option<StdRng>>,
    /// The LoRA dropout state after the forward pass, restored once the backward is done.
    rng_after: Option<StdRng>,
}
