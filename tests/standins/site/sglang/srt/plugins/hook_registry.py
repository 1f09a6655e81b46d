"""Minimal stand-in for ``sglang.srt.plugins.hook_registry`` (tests only, not SGLang), used only
when the real 0.5.23 file cannot be obtained: AROUND hooks with the real call convention
``hook(original_fn, *args, **kwargs)``, applied with pkgutil.resolve_name + setattr."""

import enum
import functools
import pkgutil
from collections import defaultdict


class HookType(enum.Enum):
    BEFORE = "before"
    AFTER = "after"
    AROUND = "around"
    REPLACE = "replace"


class HookRegistry:
    _hooks = defaultdict(list)
    _patched = set()

    @classmethod
    def register(cls, target, hook, hook_type=HookType.AFTER, *, source=None):
        cls._hooks[target].append((hook_type, hook))

    @classmethod
    def apply_hooks(cls):
        for target, hooks in cls._hooks.items():
            if target in cls._patched:
                continue
            obj_path, attr = target.rsplit(".", 1)
            obj = pkgutil.resolve_name(obj_path)
            wrapped = getattr(obj, attr)
            for hook_type, hook in hooks:
                assert hook_type == HookType.AROUND
                wrapped = cls._around(wrapped, hook)
            setattr(obj, attr, wrapped)
            cls._patched.add(target)

    @staticmethod
    def _around(original, hook):
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            return hook(original, *args, **kwargs)
        return wrapper

    @classmethod
    def reset(cls):
        cls._hooks.clear()
        cls._patched.clear()
