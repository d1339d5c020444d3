import fp from 'fastify-plugin'
import { Gauge } from 'prom-client'
import { TenantRequestTurns, type RequestTurnsOptions } from '../lib/fairness/request-turns.js'

/**
 * How tenants share the event loop once it is busy (lib/fairness/request-turns.ts):
 * - quantumMs: a turn's work before heavy tenants' requests wait. Long enough that an
 *   unsaturated service never queues (a request's own work is 0.1 to 0.5 ms), short enough
 *   that a calm tenant's request meets a few milliseconds of another's at most.
 * - busyShare: heavy tenants get what the loop has to spare below half its time, so the loop
 *   always has the other half for everyone else's requests, their garbage collection and the
 *   machine's other threads. `npm run bench:noisy` (memory): a calm tenant's p99 ×1.4 and
 *   ×1.5 with 0.5, ×1.7 with 0.7, where the flood's full buckets give it most of the loop.
 * - busyWindowMs: the loop's busy share is its last few tens of milliseconds.
 * - maxWaitMs: however busy the loop, a heavy tenant gets a request through every 10 ms.
 * - presenceWindowMs: a tenant's requests in the service are averaged over about a second,
 *   so that a calm tenant whose requests take a millisecond each still counts as there (a
 *   flood counts at once by its count now).
 */
const REQUEST_TURNS: RequestTurnsOptions = { quantumMs: 2, busyShare: 0.5, busyWindowMs: 20, maxWaitMs: 10, presenceWindowMs: 1000 }

/**
 * Lets each authenticated request go on in its tenant's turn once the event loop is busy
 * (lib/fairness/request-turns.ts), after authentication, before the handler: a tenant with
 * many requests in the service no longer puts them all in front of another tenant's.
 */
export default fp(async function tenantTurnsPlugin (fastify) {
  const turns = new TenantRequestTurns(REQUEST_TURNS)
  const { registry } = fastify.metrics
  registry.registerMetric(new Gauge({
    name: 'email_otp_requests_waiting_turn',
    help: 'Authenticated requests of heavy tenants waiting for their turn at a busy event loop.',
    registers: [],
    collect () { this.set(turns.waiting) }
  }))
  // Synchronous, as on every request: most go on at once.
  fastify.addHook('preHandler', (request, reply, done) => {
    const key = request.auth
    if (key === null) {
      done()
      return
    }
    // 'close' comes once whatever ends the response (sent, failed, or its connection gone),
    // never before this hook returns.
    reply.raw.once('close', turns.enter(key.tenant.id, done))
  })
}, { name: 'tenant-turns', dependencies: ['auth', 'metrics'], fastify: '5.x' })
