"""Which commands are chaos, and what of each is checked before it runs.

Decides, for a simple command the shell will start: `faultplane` subcommands (read-only ones pass; `run`,
`gameday` and `search` have their experiments checked by the engine's evaluation; approving and switching the
policy are a person's), Chaos Toolkit's `chaos run`, and fault tools (kubectl and oc verbs that change the
cluster, helm, container runtimes, cloud CLIs, tc, iptables, nft, stress-ng, toxiproxy, pumba, kill ...): which
of their uses change the system, and the targets they name (flags, here-documents, globbed files, the current
kube context, the namespace when the inventory declares namespaces) scanned against the policy. A word built
at run time in any of them is refused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from faultplane.hook.argv import Resolved
from faultplane.hook.asking import PolicyAsker, Refuse
from faultplane.hook.parse import UNKNOWN, Command, is_known

TYPE_CHECKING = False  # typing itself costs the hook ~5 ms; annotations are strings here anyway
if TYPE_CHECKING:
    from typing import Any

__all__ = ["ChaosTools"]

_READ_ONLY = {
    "validate", "schema", "journal", "runs", "experiments", "abort", "drivers", "discover", "mcp", "report",
    "reports", "analyze", "status", "version", "--help", "-h", "--version", "demo", "compliance", "design",
}  # fmt: skip
_TAKES_VALUE = {
    "--var", "--var-file", "--store", "--policy", "--approval", "--journal", "--output", "-o", "--seed",
    "--format", "-f", "--approver", "--reason", "--ttl-hours", "--stage", "--rollback-strategy",
    "--log-file", "--settings", "--journal-path", "--hypothesis-strategy", "--hypothesis-frequency",
}  # fmt: skip

# fault tools: verbs that change the system (None: every use changes it)
_KUBE_MUTATING = {
    "delete", "drain", "cordon", "uncordon", "scale", "rollout", "taint", "patch", "edit", "apply", "replace",
    "set", "label", "annotate", "create", "run", "expose", "autoscale", "exec", "debug", "cp", "evict",
    "attach",
}  # fmt: skip
_KUBE_GLOBAL_VALUE = {
    "-n",
    "--namespace",
    "--context",
    "--cluster",
    "--kubeconfig",
    "-s",
    "--server",
    "--user",
    "--as",
    "--as-group",
    "--token",
    "--request-timeout",
    "-v",
    "--v",
}
_HELM_MUTATING = {"uninstall", "delete", "del", "un", "rollback", "upgrade", "install", "test"}
_FAULT_TOOLS = {
    "tc", "iptables", "ip6tables", "iptables-legacy", "iptables-nft", "ip6tables-legacy", "nft", "ebtables",
    "stress-ng", "stress", "toxiproxy-cli", "toxiproxy", "pumba", "kill", "pkill", "killall", "blade",
    "chaosd", "litmusctl", "gremlin", "powerfulseal", "comcast", "tcset", "tcdel", "stressor", "chaosblade",
}  # fmt: skip
_VERB_TOOLS = {"kubectl", "oc", "kubecolor", "helm", "docker", "podman", "nerdctl", "crictl", "aws", "gcloud",
               "az", "doctl", "systemctl", "service"}  # fmt: skip
_CONTAINER_MUTATING = {"kill", "stop", "rm", "pause", "restart", "network", "update", "exec"}
_CLOUD_MUTATING = re.compile(
    r"delete|terminate|stop|reboot|reset|failover|detach|deregister|start-experiment|scale|drain|remove",
)
_SHORT_FLAG_NAMES = {"n": "--namespace"}
_KUBE_CONFIG_FLAGS = {
    "--namespace": "namespace",
    "--context": "context",
    "--cluster": "cluster",
    "--kube-context": "context",
    "--env": "env",
    "--environment": "env",
}

_BUILT_AT_RUN_TIME = (
    "the `{what}` command builds words at run time ($(...), `...`, $VAR, xargs, find -exec, a loop), so it "
    "cannot be checked before it runs. Instead: write the {what} command out literally."
)


class ChaosTools(PolicyAsker):
    """The judge's view of chaos tools: the Faultplane CLI, Chaos Toolkit and the fault tools."""

    def faultplane(self, args: list[str], cmd: Command, res: Resolved) -> None:
        """`args` are the arguments after `faultplane`."""
        positional: list[str] = []
        options: dict[str, list[str]] = {}
        j = 0
        while j < len(args):
            a = args[j]
            if a.startswith("--") and "=" in a:
                k, _, v = a.partition("=")
                options.setdefault(k, []).append(v)
            elif a.startswith("-") and a != "-":
                if a in _TAKES_VALUE and j + 1 < len(args):
                    options.setdefault(a, []).append(args[j + 1])
                    j += 1
                else:
                    options.setdefault(a, [])
            else:
                positional.append(a)
            j += 1
        if not positional:
            return
        sub = positional[0]
        if not is_known(sub):
            raise Refuse(_BUILT_AT_RUN_TIME.format(what="faultplane"))
        if sub == "approve" or (sub, *positional[1:2]) in {
            ("guard", "approve"),
            ("approvals", "keygen"),
            ("approvals", "sign"),
        }:
            raise Refuse("approvals are given by a person with `faultplane approve`, not by an agent")
        if "--policy" in options:
            raise Refuse("`--policy` switches the guardrail policy; only a person chooses the policy")
        if sub in _READ_ONLY or sub == "guard":
            return
        words = [*args, *([UNKNOWN] if res.extra_unknown else [])]
        if not all(is_known(w) for w in words):
            raise Refuse(_BUILT_AT_RUN_TIME.format(what="faultplane"))
        cwd = self.need_cwd(cmd, positional[1:] + options.get("--var-file", []))
        variables: dict[str, Any] = {}
        try:
            from faultplane.core.config import load_var_file, parse_var

            for vf in options.get("--var-file", []):
                variables.update(load_var_file(vf if Path(vf).is_absolute() else cwd / vf))
            for item in options.get("--var", []):
                k, v = parse_var(item)
                variables[k] = v
        except Exception as exc:
            raise Refuse(f"cannot read the command's variables to check them: {exc}") from None
        if variables:
            self.scan_values({"variables": variables}, "the command's --var values")
        approval = _last(options, "--approval") or os.environ.get("FAULTPLANE_APPROVAL")
        store_path = _last(options, "--store")
        if sub in ("run", "gameday", "search"):
            targets = positional[1:] if sub == "run" else [p for p in positional[1:] if Path(p).suffix]
            for t in targets:
                src: str | Path = t
                if Path(t).suffix or (cwd / t).exists():
                    src = Path(os.path.expanduser(t))
                    src = src if src.is_absolute() else cwd / src
                self.experiment(
                    src, repr(t), variables=variables, approval_token=approval, store_path=store_path
                )
            return
        # commands we do not know yet: their arguments must not name production
        self.scan_values({"arguments": positional[1:]}, f"`faultplane {sub}`")

    def chaostoolkit(self, args: list[str], cmd: Command, res: Resolved) -> None:
        """Chaos Toolkit: `chaos [global options] run [options] EXPERIMENT` runs the experiment's actions."""
        i = 0
        global_value = {"--log-file", "--settings", "--log-format", "--log-file-level"}
        while i < len(args) and args[i].startswith("-"):
            i += 2 if args[i] in global_value and "=" not in args[i] else 1
        if i >= len(args):
            return
        sub = args[i]
        if not is_known(sub):
            raise Refuse(_BUILT_AT_RUN_TIME.format(what="chaos"))
        if sub != "run":
            return  # discover, init, info, validate only read or write files of their own
        rest = [*args[i + 1 :], *([UNKNOWN] if res.extra_unknown else [])]
        if not all(is_known(w) for w in rest):
            raise Refuse(_BUILT_AT_RUN_TIME.format(what="chaos"))
        value_opts = {
            "--journal-path",
            "--dry",
            "--rollback-strategy",
            "--var",
            "--var-file",
            "--hypothesis-strategy",
            "--hypothesis-frequency",
            "--fail-fast",
            "--control-file",
        }
        positional: list[str] = []
        variables: dict[str, Any] = {}
        var_files: list[str] = []
        j = 0
        while j < len(rest):
            a = rest[j]
            opt, eq, inline = a.partition("=")
            if a.startswith("-") and opt in value_opts:
                value = inline if eq else (rest[j + 1] if j + 1 < len(rest) else "")
                j += 1 if eq else 2
                if opt == "--var":
                    k, _, v = value.partition("=")
                    variables[k.split(":", 1)[0]] = v
                elif opt == "--var-file":
                    var_files.append(value)
                continue
            if not a.startswith("-"):
                positional.append(a)
            j += 1
        cwd = self.need_cwd(cmd, positional + var_files)
        if var_files:
            try:
                from faultplane.core.config import load_var_file

                for vf in var_files:
                    variables.update(load_var_file(vf if Path(vf).is_absolute() else cwd / vf))
            except Exception as exc:
                raise Refuse(f"cannot read the command's variables to check them: {exc}") from None
        if variables:
            self.scan_values({"variables": variables}, "the `chaos run` --var values")
        for p in positional[:1]:
            if re.match(r"https?://", p):
                raise Refuse(
                    "`chaos run` of an experiment fetched at run time cannot be checked. "
                    "Instead: download it, read it, and run the local file."
                )
            path = Path(os.path.expanduser(p))
            self.experiment(path if path.is_absolute() else cwd / path, repr(p), variables=variables)

    def is_chaos(self, head: str, args: list[str]) -> bool:
        if head in _FAULT_TOOLS or head in ("faultplane", "chaos"):
            return True
        if head in _VERB_TOOLS and not all(is_known(a) for a in args[:3]):
            return True  # `kubectl "$@"`: the verb itself is decided at run time
        if head in ("kubectl", "oc", "kubecolor"):
            verb = _kube_verb(args)
            return (
                verb is None
                or verb in _KUBE_MUTATING
                or (verb == "config" and any(a in ("use-context", "set-context", "use") for a in args))
            )
        if head == "helm":
            verb = next((a for a in args if not a.startswith("-")), None)
            return verb is None or verb in _HELM_MUTATING
        if head in ("docker", "podman", "nerdctl", "crictl"):
            verb = next((a for a in args if not a.startswith("-")), None)
            return verb is None or verb in _CONTAINER_MUTATING
        if head in ("aws", "gcloud", "az", "doctl"):
            return any(is_known(a) and _CLOUD_MUTATING.search(a) for a in args)
        if head in ("systemctl", "service"):
            return any(a in ("stop", "restart", "kill", "disable", "mask", "isolate") for a in args)
        return False

    def fault_tool(self, head: str, args: list[str], cmd: Command, res: Resolved) -> None:
        if not self.is_chaos(head, args):
            return
        if not all(is_known(a) for a in args) or res.extra_unknown:
            # a fault whose target arrives at run time cannot be checked against production names
            raise Refuse(_BUILT_AT_RUN_TIME.format(what=head))
        if cmd.piped and "-" in args:
            raise Refuse(
                f"`{head}` reads what it acts on piped into it, which cannot be checked. "
                f"Instead: write it to a file and pass the file (`{head} ... -f FILE`)."
            )
        expanded = _expand_flags(args)
        values: dict[str, Any] = {"arguments": [head, *expanded]}
        if cmd.stdin is not None:
            values["stdin"] = cmd.stdin  # `kubectl apply -f - <<EOF`: the manifest is in the here-document
        globbed = _expand_globs(args, cmd.cwd)
        if globbed:
            values["globbed"] = globbed  # bash hands the tool what `pr*.yaml` matches, not the pattern
        values.update(_flag_labels(expanded))
        if head in ("kubectl", "oc", "kubecolor", "helm") and "context" not in values:
            current = _current_kube_context(cmd.env)
            if current:
                values["context"] = current  # no --context: the fault lands on the current context
        if head in ("kubectl", "oc", "kubecolor", "helm"):
            self.kube_namespace(head, expanded, values)
        self.scan_values(values, f"`{head}` (a fault tool)")

    def kube_namespace(self, head: str, args: list[str], values: dict[str, Any]) -> None:
        """With declared namespaces, a mutating kube command must name a declared one: without `-n` it acts
        on whatever namespace the kubeconfig's context sets (which the agent can change), with `-A` on all."""
        inventory = self.policy().inventory
        if inventory is None or inventory.kube_namespaces is None:
            return
        if any(a in ("-A", "--all-namespaces") for a in args):
            raise Refuse(
                f"Faultplane policy refuses `{head}` across all namespaces (-A): the policy's target inventory "
                f"declares only {', '.join(inventory.kube_namespaces)}. Instead: name one with -n."
            )
        words = _kube_words(args)
        verb = words[0] if words else None
        kind = words[1] if len(words) > 1 else ""
        if head != "helm" and kind in ("namespace", "namespaces", "ns"):
            values["namespaces_named"] = [f"-n {w}" for w in words[2:]]  # `delete ns X`: X is the target
            return
        node_scoped = (
            verb in ("cordon", "uncordon", "drain", "taint", "config")
            or kind in ("node", "nodes", "no")
            or any(w.startswith(("node/", "nodes/")) for w in words)
        )
        if "namespace" not in values and not node_scoped:
            raise Refuse(
                f"Faultplane policy refuses `{head} {verb or ''}` without a namespace: the policy's target "
                "inventory declares the lab's namespaces, and without -n the command acts on the namespace "
                f"the kubeconfig sets. Instead: add `-n NAMESPACE` with one of {', '.join(inventory.kube_namespaces)}."
            )

    def need_cwd(self, cmd: Command, paths: Iterable[str]) -> Path:
        if cmd.cwd is None and any(not Path(os.path.expanduser(p)).is_absolute() for p in paths):
            raise Refuse(
                "the command changes to a folder only known at run time, so its relative paths cannot be "
                "checked. Instead: use an absolute path or `cd` to a literal folder."
            )
        return cmd.cwd or self.cwd


def _expand_globs(args: list[str], cwd: Path | None) -> list[str]:
    import glob

    out: list[str] = []
    for a in args:
        if cwd is None or not re.search(r"[*?\[]", a):
            continue
        pattern = a if os.path.isabs(a) else str(cwd / a)
        try:
            out += [os.path.relpath(m, cwd) if not os.path.isabs(a) else m for m in glob.glob(pattern)[:200]]
        except (OSError, ValueError):
            continue
    return out


def _last(options: Mapping[str, list[str]], name: str) -> str | None:
    values = options.get(name) or []
    return values[-1] if values else None


def _kube_words(args: list[str]) -> list[str]:
    """The positional words of a kube command (verb, kind, names), skipping global flags and their values."""
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            i += 2 if a in _KUBE_GLOBAL_VALUE else 1
            continue
        out.append(a)
        i += 1
    return out


def _kube_verb(args: list[str]) -> str | None:
    words = _kube_words(args)
    return words[0] if words else None


def _expand_flags(args: list[str]) -> list[str]:
    """`-nprod` -> `-n prod`, `--namespace=prod` -> `--namespace prod`: the forms kubectl and helm accept."""
    out: list[str] = []
    for a in args:
        if a.startswith("--") and "=" in a:
            k, _, v = a.partition("=")
            out += [k, v]
        elif len(a) > 2 and a[0] == "-" and a[1] in _SHORT_FLAG_NAMES and a[2] != "-":
            out += [_SHORT_FLAG_NAMES[a[1]], a[2:].removeprefix("=")]
        else:
            out.append(a)
    return out


def _flag_labels(args: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for i, a in enumerate(args[:-1]):
        name = _KUBE_CONFIG_FLAGS.get(a) or ("namespace" if a == "-n" else None)
        if name:
            labels[name] = args[i + 1]
    return labels


def _current_kube_context(env: Mapping[str, str]) -> str | None:
    raw = env.get("KUBECONFIG") or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    for part in raw.split(os.pathsep)[:4]:
        try:
            with open(os.path.expanduser(part), encoding="utf-8", errors="replace") as fh:
                text = fh.read(1_000_000)
        except OSError:
            continue
        m = re.search(r"^current-context:\s*[\"']?([^\s\"']+)", text, re.M)
        if m:
            return m[1]
    return None
