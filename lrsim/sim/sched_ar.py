"""Target-only decoding (``ar``): one stream of target steps, token-level SD inside if ``k2 > 1``."""

from __future__ import annotations

from .events import EventRun


class ArRun(EventRun):
    """Every step is its own cycle; the token stream runs on across step boundaries."""

    def main(self):
        srv = self.srv
        while True:
            self.set_context()
            job = self.target_job(0, carried=True)
            now = yield srv.run([job])
            self.commit(0, job.tokens, 1)
            self.advance_request(job.tokens)  # requests only set the context here: steps are not cut
            if self.rec is not None:
                self.rec.target_only(len(self.cycle_end), job)
            self.end_cycle(job.tokens, now)
            if self.stopped:
                return
