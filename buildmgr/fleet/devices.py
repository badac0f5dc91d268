"""The devices a client build sees on servers (`devices --rpc`, `--fleet`): every build with the remote backend
probed with the servers added as its tools add them, after each server is asked to take a connection and, where a
fleet file says what stands behind an endpoint, to speak the build's protocol; each remote device then named with
the device, build and protocol its server reported."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from buildmgr import backends
from buildmgr.core.errors import Unreachable, UserError
from buildmgr.devices import inventory
from buildmgr.fleet import endpoints, reports

if TYPE_CHECKING:
    from buildmgr.devices.inventory_file import Inventory
    from buildmgr.store import Build


def preview(
    installed: Sequence[Build],
    servers: tuple[str, ...],
    fleet: Sequence[reports.ServerReport],
    environ: Mapping[str, str],
    timeout: float,
) -> Inventory:
    """A fresh probe of every build with the remote backend, stored nowhere; Unreachable where a server is not
    reached, speaks another protocol than a build here (from the fleet file: said before anything connects), or did
    not serve a build's client."""
    registry, _ = backends.remote()
    builds = [b for b in installed if registry in b.receipt.recipe.backends]
    if not builds:
        part = backends.backend(registry).names.recipe
        raise UserError(f"no installed build has the {registry} backend: build one with +{part} (e.g. cpu+{part})")
    spoken = {b.id: endpoints.build_protocol(b) for b in builds}
    other = [
        f"{r.endpoint} (build {r.build}) speaks protocol {r.protocol}, {build_id} here {protocol}"
        for r in fleet
        for build_id, protocol in spoken.items()
        if protocol is not None and r.protocol != protocol
    ]
    if other:
        raise Unreachable(
            f"llama.cpp refuses a server of another {registry} protocol at connect: "
            + "; ".join(other)
            + ": serve the same build everywhere (buildmgr install --from)"
        )
    endpoints.check(servers, timeout)
    data = inventory.preview(builds, environ, servers)
    failed = [
        f"{build_id}: {entry.probe.error}" for build_id, entry in sorted(data.builds.items()) if not entry.probe.ok
    ]
    if failed:
        raise Unreachable(f"the servers {','.join(servers)} did not serve every build: " + "; ".join(failed))
    named = [
        f"{name} is {device.name} of {report.endpoint}: {device.description} ({device.backend}, build {report.build}, "
        f"protocol {report.protocol})"
        for name, (report, device) in reports.behind(fleet, registry).items()
    ]
    return dataclasses.replace(data, notes=(*data.notes, *named))
