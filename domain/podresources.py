"""kubelet PodResources v1 ``ListPodResourcesResponse`` (proto3 JSON) -> device holders.

PodResources names pods by namespace + name, never by UID: the UID valid at the
snapshot's time is resolved later from the watch stream.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceHolder", "PodResourcesError", "device_holders", "snapshot_holders"]


class PodResourcesError(ValueError):
    """The response does not have the ListPodResourcesResponse shape."""


@dataclass(frozen=True)
class DeviceHolder:
    namespace: str
    pod: str
    container: str
    resource: str


def _get(obj: dict, camel: str, snake: str, default=None):
    return obj.get(camel, obj.get(snake, default))


def device_holders(response: dict) -> dict[str, DeviceHolder]:
    """Every device id in the snapshot -> who holds it (DRA claims are not devices here)."""
    if not isinstance(response, dict):
        raise PodResourcesError("response must be a JSON object")
    pods = _get(response, "podResources", "pod_resources", [])
    if not isinstance(pods, list):
        raise PodResourcesError("podResources must be a list")
    holders: dict[str, DeviceHolder] = {}
    for i, pod in enumerate(pods):
        if not isinstance(pod, dict) or "name" not in pod or "namespace" not in pod:
            raise PodResourcesError(f"podResources[{i}] needs name and namespace")
        for key in ("namespace", "name"):
            if not isinstance(pod[key], str):
                raise PodResourcesError(f"podResources[{i}].{key} must be a string, got {pod[key]!r}")
        for j, container in enumerate(_list(pod, "containers", "containers", f"podResources[{i}]")):
            at = f"podResources[{i}].containers[{j}]"
            if not isinstance(container, dict):
                raise PodResourcesError(f"{at} must be an object, got {container!r}")
            if not isinstance(container.get("name", ""), (str, type(None))):
                raise PodResourcesError(f"{at}.name must be a string, got {container['name']!r}")
            for k, dev in enumerate(_list(container, "devices", "devices", at)):
                if not isinstance(dev, dict):
                    raise PodResourcesError(f"{at}.devices[{k}] must be an object, got {dev!r}")
                resource = _get(dev, "resourceName", "resource_name", "")
                if not isinstance(resource, (str, type(None))):
                    raise PodResourcesError(f"{at}.devices[{k}].resourceName must be a string, got {resource!r}")
                for device_id in _list(dev, "deviceIds", "device_ids", f"{at}.devices[{k}]"):
                    if not isinstance(device_id, (str, int)) or isinstance(device_id, bool):
                        raise PodResourcesError(f"{at}.devices[{k}].deviceIds holds {device_id!r}, not a device id")
                    holders[str(device_id)] = DeviceHolder(pod["namespace"], pod["name"],
                                                           container.get("name") or "", resource or "")
    return holders


def snapshot_holders(response: dict) -> dict[str, tuple[str, str, str, str]]:
    """What a node's segment keeps of a snapshot: device id -> (namespace, pod, container,
    resource)."""
    return {d: (h.namespace, h.pod, h.container, h.resource) for d, h in device_holders(response).items()}


def _list(obj: dict, camel: str, snake: str, at: str) -> list:
    """A repeated field: missing or null is empty; anything but a list is an error."""
    value = _get(obj, camel, snake)
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodResourcesError(f"{at}.{camel} must be a list, got {value!r}")
    return value
