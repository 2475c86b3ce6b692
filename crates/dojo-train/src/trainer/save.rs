//! Saving a run's weights: checkpoints, `final` and `merged` ([`Saver`]), and merging a LoRA
//! adapter into its base model afterwards ([`merge_adapter`]).

use super::*;

/// Where and how a run's weights are saved: checkpoints, `final` and `merged`.
pub(super) struct Saver<'a> {
    out: &'a Path,
    src: &'a ModelSource,
    base_cfg: Option<Json>,
    /// The source's path, which an adapter names as its base.
    base_name: String,
    bos: Option<u32>,
    eos: Option<u32>,
}

impl<'a> Saver<'a> {
    pub(super) fn new(
        out: &'a Path,
        src: &'a ModelSource,
        bos: Option<u32>,
        eos: Option<u32>,
    ) -> Result<Self, TrainError> {
        Ok(Saver {
            out,
            src,
            base_cfg: src.base_config()?,
            base_name: src.path().display().to_string(),
            bos,
            eos,
        })
    }

    fn model_dir(&self, d: &Path, model: &TrainModel) -> Result<(), TrainError> {
        write_model_dir(
            d,
            model,
            self.src,
            self.base_cfg.as_ref(),
            self.bos,
            self.eos,
        )
    }

    /// Checkpoint `state.step` (weights, optimizer, trainer state), keep the newest `keep`,
    /// and rewrite the report.
    pub(super) fn checkpoint(
        &self,
        model: &TrainModel,
        opt: &AdamW,
        state: &TrainerState,
        keep: usize,
    ) -> Result<(), TrainError> {
        let name = checkpoint::checkpoint_name(state.step);
        dojo_rundir::checkpoint::publish(self.out, &name, |d| {
            match model.lora() {
                // The frozen base is the source's: the adapter is all there is to save.
                Some(l) => l.save(d, &self.base_name)?,
                None => self.model_dir(d, model)?,
            }
            opt.save(&d.join(checkpoint::OPTIMIZER_FILE))?;
            let s = serde_json::to_value(state).map_err(|source| TrainError::Serialise {
                what: "the trainer state",
                source,
            })?;
            write_json(&d.join(checkpoint::STATE_FILE), &s)
        })?;
        dojo_rundir::checkpoint::prune(self.out, checkpoint::STATE_FILE, keep)?;
        crate::report::write(self.out)?;
        Ok(())
    }

    /// `OUT/final` (with LoRA: the adapter) and, when `merge` and LoRA, `OUT/merged`; each
    /// written again only when missing or when this invocation `trained`.
    pub(super) fn finish(
        &self,
        model: &mut TrainModel,
        merge: bool,
        trained: bool,
    ) -> Result<(Option<PathBuf>, Option<PathBuf>), TrainError> {
        let done = self.out.join("final");
        if !checkpoint::is_complete(&done) || trained {
            dojo_rundir::checkpoint::publish(self.out, "final", |d| match model.lora() {
                Some(l) => {
                    l.save(d, &self.base_name)?;
                    self.src.write_tokenizer_files(d)
                }
                None => self.model_dir(d, model),
            })?;
        }
        let mut merged_dir = None;
        if merge && model.lora().is_some() {
            let merged = self.out.join("merged");
            if !checkpoint::is_complete(&merged) || trained {
                model.merge_lora()?;
                dojo_rundir::checkpoint::publish(self.out, "merged", |d| self.model_dir(d, model))?;
            }
            merged_dir = Some(merged);
        }
        Ok((Some(done), merged_dir))
    }
}

/// Merge the LoRA adapter in `adapter_dir` (peft's layout, from `dojo train sft --lora-rank`
/// or peft itself) into the base model `src` and write the full weights as a Hugging Face
/// model directory `out` (atomically, with a completion marker) that `dojo serve` loads.
pub fn merge_adapter(
    src: &ModelSource,
    adapter_dir: &Path,
    out: &Path,
    device: &Device,
) -> Result<PathBuf, TrainError> {
    if out.exists() && !checkpoint::is_complete(out) {
        return Err(TrainError::file(
            out,
            "exists and is not a model directory dojo wrote: pick another output",
        ));
    }
    let (cfg, _) = LoraConfig::read(adapter_dir)?;
    let mut model = src.load(device)?;
    model.enable_lora(cfg, 0)?;
    if let Some(l) = model.lora() {
        l.load_weights(adapter_dir)?;
    }
    model.merge_lora()?;
    let fmt = src.chat_format()?;
    let base_cfg = src.base_config()?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = out
        .file_name()
        .ok_or_else(|| TrainError::file(out, "not a directory name"))?
        .to_string_lossy()
        .into_owned();
    std::fs::create_dir_all(&parent).map_err(|e| TrainError::file(&parent, e))?;
    dojo_rundir::checkpoint::publish(&parent, &name, |d| {
        write_model_dir(
            d,
            &model,
            src,
            base_cfg.as_ref(),
            fmt.tokenizer.bos_id(),
            fmt.tokenizer.eos_id(),
        )
    })
}
