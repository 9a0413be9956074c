"""Writes that would change a guardrail file, and reads of the approval secrets, in a shell command.

Decides which paths a command writes (redirections, rm/mv/cp/install/rsync/tee/dd/sed -i/git checkout/editors
and the like, curl and wget outputs) and refuses any that is or could be (a path only known at run time
matching a guardrail name) a policy, approval or key file; and refuses a command that touches the approver's
key. What protection covers which path is `protect.py`'s.
"""

from __future__ import annotations

import re
from pathlib import Path

from faultplane.hook import protect
from faultplane.hook.argv import Resolved
from faultplane.hook.asking import Refuse
from faultplane.hook.parse import UNKNOWN, Command, is_known, resolve_path

__all__ = ["GuardedFiles"]

_MAX_PATCH_BYTES = 8 * 1024 * 1024  # read of a patch file to find the files it changes

_WRITE_ALL = {
    "rm",
    "unlink",
    "shred",
    "truncate",
    "chmod",
    "chown",
    "chgrp",
    "touch",
    "rmdir",
    "chattr",
    "setfacl",
    "ln",
    "mv",
    "srm",
    "wipe",
}


class GuardedFiles:
    """The judge's view of files: what a command writes or reads that guards the guardrails."""

    def writes(self, cmd: Command, res: Resolved, written: set[Path]) -> None:
        for op, target in cmd.redirects:
            if op in (">", ">>", "&>", "&>>", ">|", "<>", ">&") and not (op == ">&" and target.isdigit()):
                path = self.check_write(target, cmd.cwd, f"redirect {op}")
                if path is not None:
                    written.add(path)
        if not res.argv or not is_known(res.argv[0]):
            return
        head, args = res.argv[0], res.argv[1:]
        positional = [a for a in args if not a.startswith("-") or a == "-"]
        targets: list[str] = []
        if head in _WRITE_ALL or head == "tee":
            targets = positional
        elif head in ("cp", "install", "rsync", "scp", "curl", "wget"):
            dest = _option_value(args, ("-t", "--target-directory"))
            if head in ("curl", "wget"):
                dest = _option_value(args, ("-o", "--output", "-O", "--output-document"))
                targets = [dest] if dest else []
            else:
                targets = [dest] if dest else positional[-1:]
                if head == "rsync" and "--remove-source-files" in args:
                    targets = positional
        elif head == "dd":
            targets = [a[3:] for a in args if a.startswith("of=")]
        elif head == "sed" and any(
            a.startswith("-i") or a.startswith("--in-place") or re.fullmatch(r"-[a-zA-Z]*i.*", a)
            for a in args
        ):
            targets = positional
        elif (
            head == "git"
            and positional[:1]
            and positional[0] in ("checkout", "restore", "rm", "mv", "apply", "am")
        ):
            targets = positional[1:]
        elif head in ("patch", "ed", "ex", "vi", "vim", "nvim", "nano", "emacs"):
            targets = positional
        if head in ("patch", "apply_patch") or (head == "git" and positional[:1] in (["apply"], ["am"])):
            targets += self.patched(cmd, head, args, positional)
        for t in targets:
            path = self.check_write(
                t, cmd.cwd, head, recursive=head in ("rm", "mv", "chmod", "chown", "rsync")
            )
            if path is not None:
                written.add(path)
        if head in ("chmod",) and any(a in ("+x", "u+x", "a+x", "755", "700") for a in args):
            pass  # marking a just-written file executable matters when it runs: caught at that point

    def patched(self, cmd: Command, head: str, args: list[str], positional: list[str]) -> list[str]:
        """The files a patch tool would change, read from the patch itself: a here-document, the text given as
        an argument (apply_patch), or the patch file (`patch -i F`, `patch < F`, `git apply F`)."""
        texts = [cmd.stdin] if cmd.stdin is not None else []
        files = [t for op, t in cmd.redirects if op == "<"]
        if head == "apply_patch":
            texts += [a for a in args if "\n" in a]  # the patch given whole as the argument
        elif head == "git":
            files += positional[1:]
        else:
            given = _option_value(args, ("-i", "--input"))
            files += [given] if given else []
        for word in files:
            path = resolve_path(word, cmd.cwd) if is_known(word) else None
            if path is None or not path.is_file():
                raise Refuse(
                    f"`{head}` applies a patch that cannot be read now ({word[:80]!r}), so the files it changes "
                    "cannot be checked. Instead: write the patch file first, then apply it in a next command."
                )
            with path.open("rb") as fh:
                texts.append(fh.read(_MAX_PATCH_BYTES).decode("utf-8", "replace"))
        if not texts and cmd.piped:
            raise Refuse(
                f"`{head}` reads its patch from a pipe or standard input, so the files it changes cannot be "
                "checked. Instead: give it the patch as a file or a here-document."
            )
        return [target for text in texts for target in protect.patch_targets(text)]

    def check_write(self, word: str, cwd: Path | None, how: str, *, recursive: bool = False) -> Path | None:
        if not is_known(word):
            if protect.could_name_guardrail(word.replace(UNKNOWN, "*")):
                raise Refuse(
                    f"`{how}` writes to a path only known at run time, which could be a guardrail file. "
                    "Instead: write the path out literally."
                )
            return None
        path = resolve_path(word, cwd)
        if path is None:
            if protect.POLICY_NAME.search(word) or ".faultplane" in word:
                raise Refuse(f"`{how}` would change {word}, a guardrail file; only a person edits it")
            return None
        for candidate in [path, *protect.matches(word, cwd)]:
            why = protect.covers(candidate) if recursive else protect.protected(candidate)
            if why:
                raise Refuse(
                    f"`{how}` would change a guardrail file: {why}. Instead: ask the person to make this change."
                )
        return path

    def secrets(self, cmd: Command) -> None:
        for word in cmd.argv[1:]:
            if not is_known(word):
                continue
            for piece in [word, *re.findall(r"(?:^|=)([~/.][^\s=]*)", word)]:
                path = resolve_path(piece, cmd.cwd)
                why = protect.secret(path) if path is not None else None
                if why is None and protect.names_key(piece):
                    why = f"{piece[:80]!r} names the approval key"
                if why:
                    raise Refuse(f"the command touches Faultplane's approval secrets ({why}); agents may not")


def _option_value(args: list[str], names: tuple[str, ...]) -> str | None:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if n.startswith("--") and a.startswith(n + "="):
                return a.split("=", 1)[1]
            if not n.startswith("--") and a.startswith(n) and len(a) > len(n):
                return a[len(n) :]
    return None
