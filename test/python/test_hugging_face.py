"""Models of Hugging Face's transformers library, where it is installed (Debian sid's, beside PyTorch
2.14), built from small configs and trained as its users train them: the model itself passed to
jitckpt.checkpoint, its config's defaults left alone (decoders' use_cache=True among them), labels
given so that the model takes its own loss, batches padded to their longest row, LayerDrop at its
default of 0 (OPT, Whisper), AdamW with accumulation and clipping, in float32 and bfloat16 autocast,
and under the library's Trainer. Each trains bit for bit like the model called with use_cache=False
(itself trained twice first), within the limit, and keeps its cache where it runs without
gradients."""
import warnings
from typing import Any, Callable, Dict, List, Tuple

import pytest
import torch

import jitckpt
from jitckpt.export import capture

import families

try:
    import transformers
except ImportError:  # skipped, not uncollected: ctest counts a file that collects nothing as failed
    transformers = None

pytestmark = [pytest.mark.skipif(transformers is None, reason="Hugging Face's transformers is not installed"),
              pytest.mark.skipif(not capture.available(), reason="torch.export's training capture needs PyTorch 2.6")]

VOCAB = 128
LENGTHS = (24, 16, 32, 16)  # dynamic padding: each batch as long as its longest row


def text_batch(length: int, seed: int, kind: str) -> Dict[str, torch.Tensor]:
    """Token ids, a padding mask (each row keeps at least half its tokens) and labels."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (4, length), generator=g)
    mask = torch.ones(4, length, dtype=torch.long)
    for row in range(4):
        mask[row, int(torch.randint(length // 2, length + 1, (1,), generator=g)):] = 0
    if kind == "classes":
        labels = torch.randint(0, 3, (4,), generator=g)
    elif kind == "targets":  # an encoder-decoder's: half as long as the source
        labels = torch.randint(0, VOCAB, (4, length // 2), generator=g)
    else:
        labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def image_batch(length: int, seed: int, kind: str) -> Dict[str, torch.Tensor]:
    """Images of the config's size (a ViT's sizes are its config's: `length` is not read), and classes."""
    g = torch.Generator().manual_seed(seed)
    return {"pixel_values": torch.randn(4, 3, 64, 64, generator=g), "labels": torch.randint(0, 3, (4,), generator=g)}


def audio_batch(length: int, seed: int, kind: str) -> Dict[str, torch.Tensor]:
    """Log-mel features of the config's length (Whisper's sizes are its config's), and target ids
    half as long as `length`."""
    g = torch.Generator().manual_seed(seed)
    return {"input_features": torch.randn(4, 16, 64, generator=g),
            "labels": torch.randint(2, VOCAB, (4, length // 2), generator=g)}


def waveform_batch(length: int, seed: int, kind: str) -> Dict[str, torch.Tensor]:
    """Raw audio, 100 samples a step of `length`, and classes."""
    g = torch.Generator().manual_seed(seed)
    return {"input_values": torch.randn(4, 100 * length, generator=g), "labels": torch.randint(0, 3, (4,), generator=g)}


SPEECH = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, num_labels=3,
              conv_dim=(32,) * 3, conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
              num_conv_pos_embedding_groups=4)


def wav2vec2_config(**changes: Any) -> Any:
    return transformers.Wav2Vec2Config(**SPEECH, **changes)


def _models() -> Dict[str, Tuple[Callable[[], torch.nn.Module], Callable[..., Dict[str, torch.Tensor]], str]]:
    t = transformers
    small = dict(num_hidden_layers=4, num_attention_heads=4, intermediate_size=128)
    return {
        "gpt2": (lambda: t.GPT2LMHeadModel(t.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=4, n_head=4, n_positions=64)),
                 text_batch, "tokens"),
        "llama": (lambda: t.LlamaForCausalLM(t.LlamaConfig(vocab_size=VOCAB, hidden_size=64, num_key_value_heads=2, **small)),
                  text_batch, "tokens"),
        "t5": (lambda: t.T5ForConditionalGeneration(t.T5Config(vocab_size=VOCAB, d_model=64, d_ff=128, d_kv=16, num_layers=2,
                                                               num_heads=4, decoder_start_token_id=0, pad_token_id=0)),
               text_batch, "targets"),
        # LayerDrop at 0 (each layer draws a number it does not read) and dropout after it.
        "opt": (lambda: t.OPTForCausalLM(t.OPTConfig(vocab_size=VOCAB, hidden_size=64, ffn_dim=128, num_hidden_layers=4,
                                                     num_attention_heads=4, word_embed_proj_dim=64,
                                                     max_position_embeddings=64)),
                text_batch, "tokens"),
        "whisper": (lambda: t.WhisperForConditionalGeneration(t.WhisperConfig(
            vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
            max_source_positions=32, max_target_positions=32, pad_token_id=0, decoder_start_token_id=1)),
            audio_batch, "targets"),
        # Its GeLU in training is a torch.autograd.Function with a hand-written backward.
        "bloom": (lambda: t.BloomForCausalLM(t.BloomConfig(vocab_size=VOCAB, hidden_size=64, n_layer=4, n_head=4)),
                  text_batch, "tokens"),
        # Its recurrence's square root is a Function; its attention's mask is built from a tensor
        # literal.
        "recurrent_gemma": (lambda: t.RecurrentGemmaForCausalLM(t.RecurrentGemmaConfig(
            vocab_size=VOCAB, hidden_size=64, lru_width=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=1, intermediate_size=128, attention_window_size=16)), text_batch, "tokens"),
        # Mixture of experts whose router draws (exponential_, rand_like), applies a Function and
        # calls torch.add with a number first.
        "phimoe": (lambda: t.PhimoeForCausalLM(t.PhimoeConfig(vocab_size=VOCAB, hidden_size=64, num_key_value_heads=2,
                                                              num_local_experts=4, **small)),
                   text_batch, "tokens"),
        # SpecAugment's masks (drawn with NumPy) and LayerDrop off: docs/supported.md.
        "wav2vec2": (lambda: t.Wav2Vec2ForSequenceClassification(wav2vec2_config(mask_time_prob=0.0, layerdrop=0.0)),
                     waveform_batch, "classes"),
        # Also without SpecAugment and LayerDrop. Its pooling and positions are summed through
        # `x[..., :n]` with n the size, and every layer reads one LayerNorm of its relative positions
        # (no dropout between at hidden_dropout 0), made before the chain, which holds its statistics
        # through the step, and projects them with its attention's own query and key weights.
        "sew_d": (lambda: t.SEWDForSequenceClassification(t.SEWDConfig(**SPEECH, squeeze_factor=2, mask_time_prob=0.0,
                                                                       layerdrop=0.0, hidden_dropout=0.0)),
                  waveform_batch, "classes"),
        # One layer's weights, shared by all: under autocast the model casts each once.
        "albert": (lambda: t.AlbertForSequenceClassification(t.AlbertConfig(vocab_size=VOCAB, embedding_size=32,
                                                                            hidden_size=64, num_labels=3, **small)),
                   text_batch, "classes"),
        # Its loss branches on how many rows have a label: taken outside (test_deberta_v2_...).
        "deberta_v2": (lambda: t.DebertaV2ForSequenceClassification(t.DebertaV2Config(
            vocab_size=VOCAB, hidden_size=64, num_labels=3, relative_attention=True, pos_att_type=["p2c", "c2p"],
            max_relative_positions=32, position_buckets=16, **small)), text_batch, "classes"),
        # Its attention mask is built with torch.vmap.
        "falcon": (lambda: t.FalconForCausalLM(t.FalconConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4,
                                                              num_attention_heads=4)), text_batch, "tokens"),
        # Attention and MLP side by side on one normalized input, rotary positions on part of each head.
        "gpt_neox": (lambda: t.GPTNeoXForCausalLM(t.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=64, **small)),
                     text_batch, "tokens"),
        # Attention within a sliding window shorter than the longest batch.
        "mistral": (lambda: t.MistralForCausalLM(t.MistralConfig(vocab_size=VOCAB, hidden_size=64, num_key_value_heads=2,
                                                                 sliding_window=16, **small)),
                    text_batch, "tokens"),
        "bart": (lambda: t.BartForConditionalGeneration(t.BartConfig(
            vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64)),
            text_batch, "targets"),
        "distilbert": (lambda: t.DistilBertForSequenceClassification(t.DistilBertConfig(
            vocab_size=VOCAB, dim=64, n_layers=4, n_heads=4, hidden_dim=128, num_labels=3)), text_batch, "classes"),
        # A relative position bias of each layer's own, added to a mask the library builds only when
        # traced (unless no padding mask is passed: taken as the eager run takes it).
        "beit": (lambda: t.BeitForImageClassification(t.BeitConfig(image_size=64, patch_size=8, hidden_size=64,
                                                                   num_labels=3, use_relative_position_bias=True,
                                                                   **small)), image_batch, "classes"),
        # Its mask token, for masked image modeling, gets no gradient here.
        "dinov2": (lambda: t.Dinov2ForImageClassification(t.Dinov2Config(image_size=64, patch_size=8, hidden_size=64,
                                                                         num_labels=3, num_hidden_layers=4,
                                                                         num_attention_heads=4)),
                   image_batch, "classes"),
        # Depthwise convolutions, LayerNorm over channels last, a learned scale per block.
        "convnext": (lambda: t.ConvNextForImageClassification(t.ConvNextConfig(
            image_size=64, num_stages=2, hidden_sizes=[16, 32], depths=[2, 2], num_labels=3)), image_batch, "classes"),
        # Pools the sequence between its blocks; export bounds a size it makes from data below by -oo.
        "funnel": (lambda: t.FunnelForSequenceClassification(t.FunnelConfig(
            vocab_size=VOCAB, d_model=64, n_head=4, d_head=16, d_inner=128, block_sizes=[1, 1], num_labels=3)),
            text_batch, "classes"),
        # Relative attention with its positions' own biases.
        "xlnet": (lambda: t.XLNetForSequenceClassification(t.XLNetConfig(vocab_size=VOCAB, d_model=64, n_layer=4, n_head=4,
                                                                          d_inner=128, num_labels=3)),
                  text_batch, "classes"),
        "bert": (lambda: t.BertForSequenceClassification(t.BertConfig(vocab_size=VOCAB, hidden_size=64, num_labels=3, **small)),
                 text_batch, "classes"),
        "vit": (lambda: t.ViTForImageClassification(t.ViTConfig(image_size=64, patch_size=8, hidden_size=64, num_labels=3,
                                                                 **small)),
                image_batch, "classes"),
    }


MODELS = ["gpt2", "llama", "t5", "opt", "whisper", "bloom", "recurrent_gemma", "phimoe", "falcon", "gpt_neox", "mistral",
          "bart", "wav2vec2", "sew_d", "funnel", "xlnet", "bert", "albert", "distilbert", "vit", "beit", "dinov2",
          "convnext"]
DECODERS = ["gpt2", "llama", "t5", "opt", "whisper", "bloom", "recurrent_gemma", "phimoe", "falcon", "gpt_neox",
            "mistral", "bart"]  # their configs say use_cache=True


# A transformer's block is cut between its attention and its MLP; a cut inside a ConvNeXt block would
# carry its residual beside the activation, so the partition cuts between its blocks.
STAGES_PER_BLOCK = {"convnext": 1}


def layers(config: Any) -> int:
    """Blocks of the model (a ConvNeXt's config counts them by stage)."""
    return config.num_hidden_layers if hasattr(config, "num_hidden_layers") else sum(config.depths)


def make(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    return _models()[name][0]().train()


def batches(name: str) -> List[Dict[str, torch.Tensor]]:
    _, batch, kind = _models()[name]
    return [batch(length, i, kind) for i, length in enumerate(LENGTHS)]


def adamw_steps(model: torch.nn.Module, inputs: List[Dict[str, torch.Tensor]], autocast: bool,
                loss_outside: bool = False) -> List[torch.Tensor]:
    """Two micro-batches a step, gradients clipped: each loss, then each step's gradients and
    parameters. loss_outside: the model is called without the labels, and the loss taken on its
    logits."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=1e-2)
    record: List[torch.Tensor] = []
    for i, kwargs in enumerate(inputs):
        torch.manual_seed(i)  # dropout
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            if loss_outside:
                logits = model(**{k: v for k, v in kwargs.items() if k != "labels"}).logits
                loss = torch.nn.functional.cross_entropy(logits.float(), kwargs["labels"])
            else:
                loss = model(**kwargs).loss
        (loss / 2).backward()
        record.append(loss.detach().clone())
        if i % 2 == 1:
            torch.nn.utils.clip_grad_norm_(parameters, 0.5)
            record += [torch.zeros(0) if p.grad is None else p.grad.clone() for p in parameters]  # (unused: none)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            record += [p.detach().clone() for p in parameters]
    return record


def assert_same(reference: List[torch.Tensor], other: List[torch.Tensor], what: str) -> None:
    assert len(reference) == len(other), what
    for i, (a, b) in enumerate(zip(reference, other)):
        assert a.dtype == b.dtype and torch.equal(a, b), \
            f"{what}, record {i}: max difference {(a.double() - b.double()).abs().max()}"


def without_cache(name: str) -> torch.nn.Module:
    model = make(name)
    model.config.use_cache = False
    return model


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_trains_bit_for_bit_as_the_model_without_its_cache(name, autocast):
    inputs = batches(name)
    reference = adamw_steps(without_cache(name), inputs, autocast)
    assert_same(reference, adamw_steps(without_cache(name), inputs, autocast), f"{name}: the model itself, twice")
    model = jitckpt.checkpoint(make(name), memory_limit="min")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        record = adamw_steps(model, inputs, autocast)
    assert_same(reference, record, f"{name} through jitckpt")
    info = jitckpt.plan(model)
    assert info["num_stages"] >= STAGES_PER_BLOCK.get(name, 2) * layers(model.module.config), info["text"]
    said_cache = [w for w in caught if "use_cache=False" in str(w.message)]
    assert bool(said_cache) == (name in DECODERS), [str(w.message) for w in caught]


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_deberta_v2_trains_bit_for_bit_with_its_loss_taken_outside(autocast):
    inputs = batches("deberta_v2")
    reference = adamw_steps(make("deberta_v2"), inputs, autocast, loss_outside=True)
    assert_same(reference, adamw_steps(make("deberta_v2"), inputs, autocast, loss_outside=True), "twice")
    model = jitckpt.checkpoint(make("deberta_v2"), memory_limit="min")
    assert_same(reference, adamw_steps(model, inputs, autocast, loss_outside=True), "deberta_v2 through jitckpt")
    assert model.front_end == "export" and jitckpt.plan(model)["num_stages"] > 7


def test_deberta_v2_with_labels_says_to_take_the_loss_outside():
    model = jitckpt.checkpoint(make("deberta_v2"), memory_limit="min")
    with pytest.raises(capture.CaptureError, match=r"modeling_deberta_v2.py.*label_index.size\(0\) > 0.*"
                                                   r"call the model without them"):
        model(**batches("deberta_v2")[0])


def mamba(**changes: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.MambaForCausalLM(transformers.MambaConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, state_size=8, use_cache=False, **changes)).train()


def test_mamba_scans_as_its_eager_run_where_its_config_lets_it():
    """Traced, Mamba scans with torch's associative_scan (through vmap, over what requires grad),
    where its eager run loops: refused, saying what to set; set, it trains bit for bit."""
    inputs = batches("gpt2")
    with pytest.raises(capture.CaptureError, match="set it to False to scan as its eager run does"):
        adamw_steps(jitckpt.checkpoint(mamba(), memory_limit="min"), inputs[:1], True)
    reference = adamw_steps(mamba(use_associative_scan=False), inputs, True)
    assert_same(reference, adamw_steps(mamba(use_associative_scan=False), inputs, True), "mamba, twice")
    model = jitckpt.checkpoint(mamba(use_associative_scan=False), memory_limit="min")
    assert_same(reference, adamw_steps(model, inputs, True), "mamba through jitckpt")
    assert jitckpt.plan(model)["num_stages"] >= 4


def test_wav2vec2s_spec_augment_drawn_with_numpy_is_refused_saying_what_to_set():
    torch.manual_seed(0)
    model = jitckpt.checkpoint(transformers.Wav2Vec2ForSequenceClassification(wav2vec2_config(layerdrop=0.0)),
                               memory_limit="min")
    with pytest.raises(capture.CaptureError, match=r"numpy.random.* at .*modeling_wav2vec2.py.*mask_time_prob"):
        model(**waveform_batch(16, 0, "classes"))


@pytest.mark.parametrize("name", ["gpt2", "t5"])
def test_a_cache_asked_for_is_off_in_training_and_kept_without_gradients(name):
    """use_cache=True passed by the caller trains as use_cache=False does; without gradients the
    model runs as it is and returns its cache."""
    inputs = batches(name)[:2]
    reference = adamw_steps(without_cache(name), inputs, False)
    model = jitckpt.checkpoint(make(name), memory_limit=0.5)
    with pytest.warns(UserWarning, match="use_cache=False"):
        record = adamw_steps(model, [dict(kwargs, use_cache=True) for kwargs in inputs], False)
        assert model(**inputs[0]).past_key_values is None
    assert_same(reference, record, f"{name}, use_cache=True passed")
    with torch.no_grad():
        assert model(**inputs[0]).past_key_values is not None


@pytest.mark.parametrize("name", MODELS)
def test_measured_step_peak_within_the_limit(name):
    """At the smallest limit, one step's peak above what was live before it, with the caller's
    inputs that the chain holds added back; the loss (taken outside, on the logits) may add what
    families.loss_held_bytes measures."""
    kwargs = {k: v for k, v in batches(name)[2].items() if k != "labels" or name in ("t5", "whisper")}
    model = jitckpt.checkpoint(make(name), memory_limit="min", profile_repeats=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cache turned off, said by the test above
        peak, allowed, info = families.eager_step_peak(model, kwargs, lambda logits: logits.float().pow(2).mean())
    assert peak <= allowed, f"{name}: measured peak {peak} bytes, allowed {allowed}, limit {info['memory_limit']}"
    assert info["memory_limit"] < info["unconstrained_peak"], info["text"]


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_trainer_trains_and_evaluates_it_as_the_model(name, tmp_path):
    """Hugging Face's Trainer: AdamW with its schedule, two micro-batches a step, clipping, and
    evaluation. It reads the arguments forward takes (to keep a batch's keys) and the model's loss
    type (to count a causal model's tokens) through the checkpointed module; the labels' name, which
    it reads from the model's class, is given."""
    pytest.importorskip("accelerate")
    _, batch_of, kind = _models()[name]
    data = [{k: v[row] for k, v in batch_of(24, seed, kind).items()} for seed in range(2) for row in range(4)]

    def train(model: torch.nn.Module) -> Tuple[List[torch.Tensor], List[float], float]:
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path), per_device_train_batch_size=2, per_device_eval_batch_size=2,
            gradient_accumulation_steps=2, max_grad_norm=0.5, learning_rate=1e-2, num_train_epochs=1,
            label_names=["labels"], use_cpu=True, report_to=[], save_strategy="no", logging_steps=1,
            seed=0, disable_tqdm=True)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:4])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the cache turned off, said by the tests above
            trainer.train()
            evaluation = trainer.evaluate()
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        return [p.detach().clone() for p in model.parameters()], losses, evaluation["eval_loss"]

    reference = train(make(name))
    assert_same(reference[0], train(make(name))[0], f"{name} under the Trainer, twice")
    checkpointed = train(jitckpt.checkpoint(make(name), memory_limit="min"))
    assert_same(reference[0], checkpointed[0], f"{name} through jitckpt under the Trainer")
    assert (reference[1], reference[2]) == (checkpointed[1], checkpointed[2])
