"""Prompt styles: byte-exact templates, their errors, the default rule, and `cudice train`'s options.

The templates here are written by the tests (invented wording, never DICE's or KernelBench's);
the checkpoints are `cudice.model.tiny`'s, made "foreign" by replacing cudice's chat template.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from cudice.model.bundled import DEMO_DIR
from cudice.model.prompt_styles import (
    CUDICE_STYLE,
    DICE_URL,
    KERNELBENCH_URL,
    RECORD,
    TEMPLATES_ENV,
    PromptStyle,
    PromptTemplateError,
    cudice_worded,
    default_style,
    inference_style,
    load_dice_style,
    read_record,
    resolve_style,
    write_record,
)
from cudice.model.prompts import chat_prompt, e2e_prompt, infill_answer_start, infill_prompt
from cudice.model.tiny import make_tiny
from cudice.model.train.cli import train_group
from cudice.model.train.data import RLTask
from cudice.model.train.rollout import prompt_token_counter, task_prompt

# Invented texts exercising what must survive: trailing spaces, blank lines, CRLF, tabs, braces of
# every kind, CUDA launches and shifts, a repeated placeholder, no final newline.
E2E = (
    b"Make it faster.  \r\n\r\n\tdef f(): return {'a': 1}  # {reference} is not a placeholder\r\n"
    b"{{ jinja }} {% raw %} k<<<grid, block>>>(x); y = a << b >> c; z = 1<<2>>3;\n\n"
    b"```python\n<<reference>>\n```\n   \nAgain: <<reference>>"
)
INFILL = b"Code:\n<<pytorch_code>>\nBefore:\n<<prefix>>\nAfter:\n<<suffix>>\n\n"
CHAT = b"<|im_start|>user\r\n<<message>><|im_end|>\n<|im_start|>assistant\n"


def _templates(folder: Path, **files: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / f"{name}.txt").write_bytes(data)
    return folder


@pytest.fixture
def dice_dir(tmp_path: Path) -> Path:
    return _templates(tmp_path / "templates", e2e=E2E, infill=INFILL)


@pytest.fixture(scope="module")
def cudice_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny(tmp_path_factory.mktemp("own") / "tiny", sdar_layout=True)


@pytest.fixture(scope="module")
def foreign_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny SDAR checkpoint whose tokenizer has another chat template, as a released DICE model's has."""
    folder = make_tiny(tmp_path_factory.mktemp("foreign") / "tiny", sdar_layout=True)
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    return folder


# --- substitution ------------------------------------------------------------------------------


def test_substitution_is_byte_exact_and_one_pass(dice_dir: Path) -> None:
    style = load_dice_style(dice_dir)
    reference = "class Model:\r\n    x = '<<prefix>>' + '{suffix}'  \n\n"
    expected = E2E.decode().replace("<<reference>>", reference)
    assert style.e2e(reference) == expected  # CRLF, spaces, braces, launches kept; value not re-read
    assert style.e2e(reference).encode() == E2E.replace(b"<<reference>>", reference.encode())
    assert (
        style.infill("A\r\n", "B <<suffix>>", "C\n") == "Code:\nA\r\n\nBefore:\nB <<suffix>>\nAfter:\nC\n\n\n"
    )
    # without chat.txt the chat turn is chat_prompt's
    assert style.chat("hi") == chat_prompt("hi")


def test_chat_template_wraps_the_message_byte_for_byte(tmp_path: Path) -> None:
    folder = _templates(tmp_path / "t", e2e=b"<|im_start|>user\n<<reference>>", chat=b"<<message>>")
    style = load_dice_style(folder, need=("e2e",))
    assert style.chat(style.e2e("R")) == "<|im_start|>user\nR"  # the template is the whole prompt
    wrapped = load_dice_style(_templates(tmp_path / "u", chat=CHAT), need=())
    assert wrapped.chat("m\n") == "<|im_start|>user\r\nm\n<|im_end|>\n<|im_start|>assistant\n"


def test_the_cudice_style_is_cudice_prompts_unchanged() -> None:
    assert CUDICE_STYLE.e2e("R") == e2e_prompt("R")
    assert CUDICE_STYLE.infill("P", "A", "B") == infill_prompt("P", "A", "B")
    assert CUDICE_STYLE.chat("m") == chat_prompt("m")
    task = RLTask("infill", 1, "P", prefix="A", suffix="B")
    assert task_prompt(task) == task_prompt(task, CUDICE_STYLE) == chat_prompt(infill_prompt("P", "A", "B"))


def test_rl_prompts_and_their_token_counts_follow_the_style(dice_dir: Path) -> None:
    style = load_dice_style(dice_dir)
    e2e, infill = RLTask("e2e", 1, "R\r\n"), RLTask("infill", 1, "P", prefix="A", suffix="B")
    assert task_prompt(e2e, style) == chat_prompt(style.e2e("R\r\n"))
    assert task_prompt(infill, style) == chat_prompt("Code:\nP\nBefore:\nA\nAfter:\nB\n\n")

    class Chars:  # an engine whose tokens are characters
        def encode(self, text: str) -> list[str]:
            return list(text)

    assert prompt_token_counter(Chars(), style)(e2e) == len(task_prompt(e2e, style))


# --- errors ------------------------------------------------------------------------------------


def test_missing_directory_and_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(PromptTemplateError, match="does not exist"):
        load_dice_style(tmp_path / "nowhere")
    folder = _templates(tmp_path / "t", e2e=E2E)
    with pytest.raises(PromptTemplateError, match=r"has no infill\.txt"):
        load_dice_style(folder)
    style = load_dice_style(folder, need=("e2e",))
    with pytest.raises(PromptTemplateError, match=r"infill template \(.* has no infill\.txt\)"):
        style.infill("P", "A", "B")
    with pytest.raises(PromptTemplateError, match="no e2e template"):
        PromptStyle("dice").e2e("R")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"Code <<pytorch_code>> <<prefix>>", r"infill\.txt: placeholder <<suffix>> is missing"),
        (
            b"<<pytorch_code>> <<prefix>> <<suffix>> <<sufix>>",
            r"infill\.txt: <<sufix>> is not a placeholder of infill\.txt",
        ),
        (b"<<pytorch_code>> <<prefix>> <<suffix>> <<reference>>", r"<<reference>> is not a placeholder"),
        (b"\xef\xbb\xbf<<pytorch_code>> <<prefix>> <<suffix>>", "byte-order mark"),
        (b"<<pytorch_code>> <<prefix>> <<suffix>> \xff", "not valid UTF-8 at byte"),
    ],
)
def test_bad_templates_name_the_file_and_the_placeholder(tmp_path: Path, data: bytes, message: str) -> None:
    folder = _templates(tmp_path / "t", e2e=E2E, infill=data)
    with pytest.raises(PromptTemplateError, match=message) as info:
        load_dice_style(folder)
    assert str(folder / "infill.txt") in str(info.value)


def test_the_infill_answer_template_is_optional_and_must_end_with_the_prefix(tmp_path: Path) -> None:
    assert load_dice_style(_templates(tmp_path / "none", infill=INFILL), need=("infill",)).infill_answer(
        "P\n"
    ) == infill_answer_start("P\n")
    ok = _templates(tmp_path / "ok", infill=INFILL, infill_answer=b"```c++\r\n<<prefix>>")
    assert load_dice_style(ok, need=("infill",)).infill_answer("P") == "```c++\r\nP"
    assert CUDICE_STYLE.infill_answer("P") == infill_answer_start("P")
    bad = _templates(tmp_path / "bad", infill=INFILL, infill_answer=b"```python\n<<prefix>>\n")
    with pytest.raises(PromptTemplateError, match=r"infill_answer.txt must end with <<prefix>>"):
        load_dice_style(bad, need=("infill",))
    with pytest.raises(PromptTemplateError, match=r"<<suffix>> is not a placeholder of infill_answer.txt"):
        load_dice_style(_templates(tmp_path / "odd", infill=INFILL, infill_answer=b"<<suffix>><<prefix>>"))


def test_a_chat_turn_inside_a_template_needs_a_chat_file(tmp_path: Path) -> None:
    folder = _templates(tmp_path / "t", e2e=b"<|im_start|>user\n<<reference>>", infill=INFILL)
    with pytest.raises(PromptTemplateError, match=r"e2e\.txt already holds a chat turn.*<<message>>"):
        load_dice_style(folder)


# --- the default rule --------------------------------------------------------------------------


def test_cudice_checkpoints_default_to_cudice(cudice_ckpt: Path, tmp_path: Path) -> None:
    if (DEMO_DIR / "config.json").is_file():
        assert default_style(DEMO_DIR)[0] == "cudice"
    assert default_style(cudice_ckpt) == ("cudice", default_style(cudice_ckpt)[1])
    assert "initialised" in default_style(cudice_ckpt)[1]
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "cudice_checkpoint.json").write_text(json.dumps({"step": 1}))
    assert default_style(trained)[0] == "cudice"


def test_a_foreign_sdar_checkpoint_defaults_to_dice(foreign_ckpt: Path, tmp_path: Path) -> None:
    style, why = default_style(foreign_ckpt)
    assert style == "dice" and "cudice neither initialised nor trained" in why


def test_the_recorded_style_wins_over_the_marker(dice_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "cudice_checkpoint.json").write_text("{}")
    write_record(out, load_dice_style(dice_dir))
    assert read_record(out) == "dice" and default_style(out)[0] == "dice"
    record = json.loads((out / RECORD).read_text())
    assert record["templates"] == str(dice_dir.resolve()) and set(record["sha256"]) == {
        "e2e.txt",
        "infill.txt",
    }
    write_record(out, CUDICE_STYLE)
    assert default_style(out)[0] == "cudice"


def test_a_foreign_checkpoint_without_templates_says_where_the_texts_are(foreign_ckpt: Path) -> None:
    with pytest.raises(PromptTemplateError) as info:
        resolve_style(None, None, foreign_ckpt)
    text = str(info.value)
    assert f"{foreign_ckpt}'s prompt style defaults to dice" in text
    for needed in (DICE_URL, KERNELBENCH_URL, "e2e.txt", "<<reference>>", "infill.txt", "<<pytorch_code>>"):
        assert needed in text
    assert "--prompt-templates DIR" in text and TEMPLATES_ENV in text and "--prompt-style cudice" in text
    assert resolve_style("cudice", None, foreign_ckpt)[0] is CUDICE_STYLE
    sft_style, _ = resolve_style(None, None, foreign_ckpt, need=())  # SFT: records verbatim
    assert sft_style.name == "dice" and sft_style.chat("m") == chat_prompt("m")
    with pytest.raises(PromptTemplateError, match="--prompt-style dice was given"):
        resolve_style("dice", None, DEMO_DIR)


def test_cudice_worded_recognises_cudice_prompts_only() -> None:
    assert cudice_worded(e2e_prompt("class Model: pass"))
    assert cudice_worded(infill_prompt("class Model: pass", "A", "B"))
    assert not cudice_worded("task 0") and not cudice_worded(e2e_prompt("x")[:40])


# --- the CLI -----------------------------------------------------------------------------------


def _rl(model: Path, tmp_path: Path, *extra: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    infill = tmp_path / "infill.jsonl"
    infill.write_text(json.dumps({"pytorch_code": "x", "prefix": "a", "middle": "b", "suffix": "c"}) + "\n")
    e2e = tmp_path / "e2e.jsonl"
    e2e.write_text(json.dumps({"idx": 1, "level": 1, "pytorch_code": "x"}) + "\n")
    args = ["rl", "--model", str(model), "--infill-data", str(infill), "--e2e-data", str(e2e)]
    return CliRunner().invoke(train_group, [*args, "--out", str(tmp_path / "o"), *extra], env=env)


def test_cli_options_are_parsed_and_checked(foreign_ckpt: Path, tmp_path: Path) -> None:
    for command in ("sft", "rl"):
        help_text = CliRunner().invoke(train_group, [command, "--help"]).output
        assert "--prompt-style [cudice|dice]" in help_text and TEMPLATES_ENV in help_text
    bad = _rl(foreign_ckpt, tmp_path, "--prompt-style", "kernelbench")
    assert bad.exit_code == 2 and "'kernelbench' is not one of 'cudice', 'dice'" in bad.output
    missing = _rl(foreign_ckpt, tmp_path)
    assert missing.exit_code == 1 and DICE_URL in missing.output and KERNELBENCH_URL in missing.output
    broken = _templates(tmp_path / "broken", e2e=b"no placeholder", infill=INFILL)
    result = _rl(foreign_ckpt, tmp_path, "--prompt-templates", str(broken))
    assert result.exit_code == 1 and "e2e.txt: placeholder <<reference>> is missing" in result.output


def test_rl_cli_takes_the_templates_from_the_environment(
    foreign_ckpt: Path, dice_dir: Path, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    from cudice.verifier.pool import count_gpus

    if count_gpus():
        pytest.skip("this machine has a GPU: the command would go on to train")
    result = _rl(foreign_ckpt, tmp_path, env={TEMPLATES_ENV: str(dice_dir)})
    # the style was built; the run then stops at the reward GPUs this machine lacks
    assert f"prompt style: dice (the default for {foreign_ckpt}" in result.output
    assert f"templates {dice_dir}" in result.output and "RL rewards need a GPU" in result.output


def _cuke(path: Path, prompts: list[str]) -> Path:
    path.write_text(
        "\n".join(json.dumps({"prompt": p, "response": "__global__ void k() {}"}) for p in prompts)
    )
    return path


def _sft(model: Path, data: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    args = ["sft", "--model", str(model), "--data", str(data), "--out", str(out), "--device", "cpu"]
    return CliRunner().invoke(
        train_group, [*args, "--epochs", "1", "--batch-size", "1", "--max-steps", "1", *extra]
    )


def test_sft_refuses_cudice_worded_records_under_the_dice_style(foreign_ckpt: Path, tmp_path: Path) -> None:
    data = _cuke(tmp_path / "corpus.jsonl", ["task 0", e2e_prompt("class Model: pass")])
    result = _sft(foreign_ckpt, data, tmp_path / "o")
    assert result.exit_code == 1
    assert "1 of the 2 records" in result.output and "line 2" in result.output
    assert "--prompt-style cudice" in result.output
    assert not (tmp_path / "o").exists()


def test_sft_trains_a_foreign_checkpoint_in_the_dice_chat_turn_and_records_it(
    foreign_ckpt: Path, tmp_path: Path
) -> None:
    from cudice.model.loader import load_checkpoint
    from cudice.model.train.sft import encode_pair

    templates = _templates(tmp_path / "t", chat=CHAT)
    data, out = _cuke(tmp_path / "cuke.jsonl", ["task 0", "task 1"]), tmp_path / "out"
    result = _sft(foreign_ckpt, data, out, "--prompt-templates", str(templates))
    assert result.exit_code == 0, result.output
    assert "prompt style: dice" in result.output
    assert read_record(out) == "dice" and default_style(out)[0] == "dice"  # the next command keeps it
    loaded = load_checkpoint(str(foreign_ckpt), device="cpu")
    style = load_dice_style(templates, need=())
    sample = encode_pair(
        loaded.tokenizer, "task 0", "r", block_size=4, pad_token_id=loaded.ids.pad, style=style
    )
    assert loaded.tokenizer.decode(sample.input_ids[: sample.num_prompt]) == CHAT.decode().replace(
        "<<message>>", "task 0"
    )
    # the same checkpoint under an explicit cudice style takes cudice's wording
    again = _sft(
        foreign_ckpt,
        _cuke(tmp_path / "c.jsonl", [e2e_prompt("x")]),
        tmp_path / "o2",
        "--prompt-style",
        "cudice",
    )
    assert again.exit_code == 0, again.output
    assert read_record(tmp_path / "o2") == "cudice"


# --- generation: `cudice generate` and the language server --------------------------------------


def test_generation_prompts_a_dice_checkpoint_with_its_templates(
    foreign_ckpt: Path, dice_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudice.model.engine import load_engine

    monkeypatch.delenv(TEMPLATES_ENV, raising=False)
    style, warning = inference_style(foreign_ckpt, None, dice_dir)
    assert (style.name, warning) == ("dice", "")
    monkeypatch.setenv(TEMPLATES_ENV, str(dice_dir))  # the server's way: the environment
    engine = load_engine(str(foreign_ckpt), device="cpu", dtype="float32", fast=False, freeze=True)
    assert engine.style.name == "dice" and engine.style_warning == ""
    ref = "class Model: pass\n"
    expected_e2e = E2E.decode().replace("<<reference>>", ref)
    assert engine.kernel_prompt(ref) == chat_prompt(expected_e2e)  # no chat.txt: cudice's chat turn
    infill = engine.infill_prompt("PRE", "SUF", ref)
    assert infill.startswith(chat_prompt(f"Code:\n{ref}\nBefore:\nPRE\nAfter:\nSUF\n\n"))
    assert infill.endswith(infill_answer_start("PRE"))  # no infill_answer.txt: a Python fence + prefix
    # with one, the answer opens the way the template says, still ending with the prefix
    (dice_dir / "infill_answer.txt").write_bytes(b"<think>\n</think>\n```cpp\n<<prefix>>")
    engine = load_engine(str(foreign_ckpt), device="cpu", dtype="float32", fast=False, freeze=True)
    opened = engine.infill_prompt("PRE", "SUF", ref)
    assert opened.startswith(chat_prompt(f"Code:\n{ref}\nBefore:\nPRE\nAfter:\nSUF\n\n"))
    assert opened.endswith("\n</think>\n```cpp\nPRE") and not opened.endswith("```pythonPRE")


def test_generation_serves_a_dice_checkpoint_without_templates_and_says_so(
    foreign_ckpt: Path, cudice_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TEMPLATES_ENV, raising=False)
    style, warning = inference_style(foreign_ckpt)
    assert style is CUDICE_STYLE
    assert "not trained on" in warning and DICE_URL in warning and TEMPLATES_ENV in warning
    assert inference_style(cudice_ckpt) == (CUDICE_STYLE, "")  # its own wording: nothing to say
    assert inference_style(DEMO_DIR) == (CUDICE_STYLE, "")
    with pytest.raises(PromptTemplateError, match="--prompt-style dice was given"):
        inference_style(foreign_ckpt, "dice")  # asked for explicitly: no silent fallback
    assert inference_style(foreign_ckpt, "cudice") == (CUDICE_STYLE, "")


def test_generate_cli_takes_the_style_and_warns_on_a_foreign_wording(
    foreign_ckpt: Path, dice_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudice.model.cli import generate_command

    monkeypatch.delenv(TEMPLATES_ENV, raising=False)
    ref = tmp_path / "ref.py"
    ref.write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
        "def get_inputs():\n    return [torch.randn(4)]\n\ndef get_init_inputs():\n    return []\n"
    )
    common = ["--model", str(foreign_ckpt), "--device", "cpu", "--max-new-tokens", "4", str(ref)]
    warned = CliRunner().invoke(generate_command, common)
    assert warned.exit_code == 0, warned.output
    assert "warning:" in warned.output and "not trained on" in warned.output
    quiet = CliRunner().invoke(generate_command, [*common, "--prompt-templates", str(dice_dir)])
    assert quiet.exit_code == 0, quiet.output
    assert "warning:" not in quiet.output
    refused = CliRunner().invoke(generate_command, [*common, "--prompt-style", "dice"])
    assert refused.exit_code != 0 and "--prompt-style dice was given" in refused.output
