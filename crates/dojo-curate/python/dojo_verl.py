"""`dojo curate`'s `tokens.parquet` as a verl SFT dataset: the exact route into verl.

verl has no pre-tokenized SFT dataset of its own; its `MultiTurnSFTDataset` re-renders the
messages with the model's template (see `examples/trainers/verl_check.py` for where that drifts).
This class hands verl our token ids and loss masks as they are, through its custom-dataset hook:

    data.custom_cls.path=crates/dojo-curate/python/dojo_verl.py
    data.custom_cls.name=DojoTokensDataset
    data.train_files=OUT/tokens.parquet

Checked with verl 0.9.1 (`examples/trainers/verl_check.py`): all rows identical to ours, two
optimizer steps through verl's collator and `sft_loss`.
"""

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch.utils.data import Dataset


class DojoTokensDataset(Dataset):
    """`tokens.parquet` for verl's SFT trainer (`data.custom_cls`): our ids and masks as they are.

    verl's `loss_mask` marks the tokens to predict, the same positions as our `assistant_masks`
    (`sft_loss` shifts it by one to line up with the log-probs). Output as MultiTurnSFTDataset's
    `pad_mode: no_padding`.
    """

    def __init__(self, parquet_files, tokenizer, config, processor=None, max_samples=-1):
        files = parquet_files if isinstance(parquet_files, list | tuple) else [parquet_files]
        files = [str(f) for f in files]
        table = pa.concat_tables([pq.read_table(f, columns=["input_ids", "assistant_masks"]) for f in files])
        self.rows = table.to_pylist()[: max_samples if max_samples > 0 else None]
        self.max_length = config.get("max_length", 1024)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        ids, mask = self.rows[i]["input_ids"], self.rows[i]["assistant_masks"]
        if len(ids) > self.max_length:
            raise ValueError(f"row {i}: {len(ids)} tokens > data.max_length {self.max_length}")
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "position_ids": torch.arange(len(ids), dtype=torch.long),
            "loss_mask": torch.tensor(mask, dtype=torch.long),
        }
