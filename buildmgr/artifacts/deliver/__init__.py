"""`install --from`: read the repository's index, signed by a key that vouches for it here, not older than one this
host saw and not expired (`freshness`); judge every artifact it lists against this host before downloading any
(`choose`, with `trust`: which key vouches), then fetch the best into the download cache (resumed where an earlier
try stopped), check its digest, signature and provenance (`fetching`), install it as install-artifact does, and
prove the choice: the installed build must see a device of the backend it was picked for, or it is removed again and
the next candidate is tried. An archive installed here before is not fetched again."""

from buildmgr.artifacts.deliver.choose import Attempt, Outcome, candidates, install_best
from buildmgr.artifacts.deliver.fetching import downloads, fetch_held, held, installed_here
from buildmgr.artifacts.deliver.freshness import Examined, Listing, examine, read_index, remember
from buildmgr.artifacts.deliver.seen import Forgotten, forget

__all__ = [
    "Attempt",
    "Examined",
    "Forgotten",
    "Listing",
    "Outcome",
    "candidates",
    "downloads",
    "examine",
    "fetch_held",
    "forget",
    "held",
    "install_best",
    "installed_here",
    "read_index",
    "remember",
]
