import fp from 'fastify-plugin'
import { Gauge } from 'prom-client'
import { TenantRequestTurns } from '../lib/tenants/request-turns.js'

/**
 * Time a turn of the event loop spends on requests before they take turns by tenant. Long
 * enough that an unsaturated service never queues (a request's own work is 0.1 to 0.5 ms),
 * short enough that a calm tenant's request meets a few milliseconds of another's at most.
 */
const REQUEST_QUANTUM_MS = 2

/**
 * Lets each authenticated request go on in its tenant's turn once the event loop is saturated
 * (lib/tenants/request-turns.ts), after authentication, before the handler: a tenant with
 * many requests in flight no longer puts them all in front of another tenant's.
 */
export default fp(async function tenantTurnsPlugin (fastify) {
  const turns = new TenantRequestTurns(REQUEST_QUANTUM_MS)
  const { registry } = fastify.metrics
  registry.registerMetric(new Gauge({
    name: 'email_otp_requests_waiting_turn',
    help: 'Authenticated requests waiting for their tenant\'s turn at a saturated event loop.',
    registers: [],
    collect () { this.set(turns.waiting) }
  }))
  // Synchronous, as on every request: most go on at once.
  fastify.addHook('preHandler', (request, _reply, done) => {
    const key = request.auth
    if (key === null) done()
    else turns.enter(key.tenant.id, done)
  })
}, { name: 'tenant-turns', dependencies: ['auth', 'metrics'], fastify: '5.x' })
