"""What a service account may do, by Kubernetes' RBAC rules, over the Roles and bindings a kustomization renders.

Roles that Kubernetes itself provides (``system:auth-delegator``, ``extension-apiserver-authentication-reader``) are
not rendered; ``bound_system_roles`` lists which of those a service account is bound to.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.deploy.manifests import Obj, Rendered


@dataclass(frozen=True)
class Binding:
    role_kind: str
    role_name: str
    namespace: str | None  # None: cluster-wide (ClusterRoleBinding)


def _subject_matches(subject: Obj, account: str, namespace: str) -> bool:
    return bool(
        subject.get("kind") == "ServiceAccount"
        and subject.get("name") == account
        and subject.get("namespace") == namespace
    )


def bindings(rendered: Rendered, account: str, namespace: str) -> list[Binding]:
    found = []
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for b in rendered.all(kind):
            if any(_subject_matches(s, account, namespace) for s in b.get("subjects", [])):
                where = None if kind == "ClusterRoleBinding" else b["metadata"]["namespace"]
                found.append(Binding(b["roleRef"]["kind"], b["roleRef"]["name"], where))
    return found


def _role(rendered: Rendered, binding: Binding) -> Obj | None:
    for role in rendered.all(binding.role_kind):
        if role["metadata"]["name"] != binding.role_name:
            continue
        if binding.role_kind == "Role" and role["metadata"].get("namespace") != binding.namespace:
            continue
        return role
    return None


def _rule_allows(rule: Obj, verb: str, group: str, resource: str) -> bool:
    return (
        (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
        and (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
        and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
    )


def allowed(
    rendered: Rendered, account: str, namespace: str, verb: str, group: str, resource: str, where: str | None
) -> bool:
    """May ``account`` do ``verb`` on ``group``/``resource`` in namespace ``where`` (None: across all namespaces)?"""
    for binding in bindings(rendered, account, namespace):
        if binding.namespace is not None and binding.namespace != where:
            continue
        role = _role(rendered, binding)
        if role is not None and any(_rule_allows(r, verb, group, resource) for r in role.get("rules", [])):
            return True
    return False


def rules_of(rendered: Rendered, account: str, namespace: str) -> list[Obj]:
    """Every rule granted to ``account`` by the rendered roles."""
    out: list[Obj] = []
    for binding in bindings(rendered, account, namespace):
        role = _role(rendered, binding)
        if role is not None:
            out.extend(role.get("rules", []))
    return out


def bound_system_roles(rendered: Rendered, account: str, namespace: str) -> set[Binding]:
    """Bindings of ``account`` to roles Kubernetes provides (not rendered here)."""
    return {b for b in bindings(rendered, account, namespace) if _role(rendered, b) is None}
