"""kubelet PodResources v1 ``ListPodResourcesResponse`` (proto3 JSON) -> device holders.

PodResources names pods by namespace + name, never by UID: the UID valid at the
snapshot's time is resolved later from the watch stream.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceHolder", "PodResourcesError", "device_holders"]


class PodResourcesError(ValueError):
    """The response does not have the ListPodResourcesResponse shape."""


@dataclass(frozen=True)
class DeviceHolder:
    namespace: str
    pod: str
    container: str
    resource: str


def _strings(where: str, obj: dict, keys: tuple[str, ...], optional: bool = False) -> None:
    """Names become fact columns later: anything but a string is refused now, not in the store."""
    for key in keys:
        if not (optional and obj.get(key) is None) and not isinstance(obj.get(key), str):
            raise PodResourcesError(f"{where}.{key} must be a string, not {type(obj[key]).__name__}")


def _list(where: str, value) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodResourcesError(f"{where} must be a list")
    return value


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
        _strings(f"podResources[{i}]", pod, ("namespace", "name"))
        for j, container in enumerate(_list(f"podResources[{i}].containers", pod.get("containers"))):
            where = f"podResources[{i}].containers[{j}]"
            if not isinstance(container, dict):
                raise PodResourcesError(f"{where} must be an object")
            _strings(where, container, ("name",), optional=True)
            for k, dev in enumerate(_list(f"{where}.devices", container.get("devices"))):
                if not isinstance(dev, dict):
                    raise PodResourcesError(f"{where}.devices[{k}] must be an object")
                resource = _get(dev, "resourceName", "resource_name", "")
                if not isinstance(resource, str):
                    raise PodResourcesError(f"{where}.devices[{k}].resourceName must be a string")
                for device_id in _list(f"{where}.devices[{k}].deviceIds", _get(dev, "deviceIds", "device_ids", [])):
                    holders[str(device_id)] = DeviceHolder(pod["namespace"], pod["name"],
                                                           container.get("name") or "", resource)
    return holders
