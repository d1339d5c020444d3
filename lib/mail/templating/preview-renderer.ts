import { Piscina } from 'piscina'
import type { PreviewJob, PreviewOutcome } from './preview-worker.js'

/**
 * How much less a preview thread weighs than the event loop when both want a core (Linux
 * niceness, where the platform lets a thread set it).
 */
const PREVIEW_THREAD_NICENESS = 10
/**
 * A preview thread idle this long is stopped: previews are occasional. An idle thread does not
 * keep the process alive, so a close need not stop it.
 */
const IDLE_MS = 60_000

// Run from the TypeScript sources (tests, `npm run dev`) the worker is a .ts file, loaded
// through the same loader as this module, which worker threads inherit.
const workerFile = new URL(import.meta.url.endsWith('.ts') ? './preview-worker.ts' : './preview-worker.js', import.meta.url).href

let pool: Piscina<PreviewJob, PreviewOutcome> | null = null

/**
 * Renders a preview's parts in a thread of their own. A preview renders a tenant's template
 * afresh with values the caller chooses, up to RENDER_BUDGET_MS of CPU per part: on the event
 * loop, each would hold every other tenant's requests for that long. In the preview thread
 * they wait for nothing but a core, which the thread's lower priority leaves to the event loop
 * first. One thread: previews are limited per tenant and taken in turns (the preview route),
 * so they queue here only behind other tenants' previews, never in front of requests.
 */
export async function renderInPreviewThread (job: PreviewJob): Promise<PreviewOutcome> {
  pool ??= new Piscina<PreviewJob, PreviewOutcome>({
    filename: workerFile,
    minThreads: 0,
    maxThreads: 1,
    idleTimeout: IDLE_MS,
    niceIncrement: PREVIEW_THREAD_NICENESS
  })
  return await pool.run(job)
}
