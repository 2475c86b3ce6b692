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
use crate::model::{Checkpointing, LossRows, TrainModel};

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
        let checkpointing = match self.checkpointing {
            Checkpointing::Off => false,
            Checkpointing::On => true,
            Checkpointing::Auto { activation_budget } => {
                let (b, t) = ids.dims2()?;
                let shape = crate::memory::BatchShape {
                    rows: b,
                    len: t,
                    logit_rows: chunk.min(n_rows),
                };
                crate::memory::needs_checkpointing(&self.config, shape, activation_budget)
            }
        };
        let n = self.config.num_layers;
        let ctx = self.block_inputs(ids)?;
        // With checkpointing: each block's input (and the dropout state it started from).
        let mut inputs = Vec::new();
        let mut rng = Vec::new();
        let mut x = self.embed(ids)?;
        if checkpointing {
            x = x.detach();
        }
        for i in 0..n {
            if checkpointing {
                rng.push(self.lora.as_ref().map(Lora::dropout_state));
                let y = self.block(i, &x, &ctx, train)?.detach();
                inputs.push(x);
                x = y;
            } else {
                x = self.block(i, &x, &ctx, train)?;
            }
        }
        let rng_after = self.lora.as_ref().map(Lora::dropout_state);

        // The head, chunk by chunk, on the last hidden states as a leaf.
        let top = Var::from_tensor(&x.detach())?;
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
        drop(top);
        let Some(mut g) = dtop else {
            return Ok(total);
        };

        if !checkpointing {
            // One pass through the graph the forward built.
            let surrogate = (x * g)?.sum_all()?;
            self.accumulate_grads(&surrogate.backward()?, grads)?;
            return Ok(total);
        }
        drop(x);
        for i in (0..n).rev() {
            let input = inputs.pop().expect("one input per block");
            if let (Some(lora), Some(Some(state))) = (&self.lora, rng.get(i)) {
                lora.set_dropout_state(state.clone());
            }
            let xv = Var::from_tensor(&input)?;
            drop(input);
            let surrogate = (self.block(i, xv.as_tensor(), &ctx, train)? * &g)?.sum_all()?;
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
                    return Ok(total);
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
        Ok(total)
    }
}
