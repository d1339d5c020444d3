import fp from 'fastify-plugin'
import { Counter, Gauge } from 'prom-client'
import { EventLoopProbe, TenantShares } from '../lib/tenants/shares.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The tenant whose place in TenantShares this request holds, until its answer is on its way. */
    tenantPlace: string | null
  }
}

/** The event loop counts as busy at this utilisation, over a window of this length. */
const BUSY_UTILISATION = 0.5
const BUSY_WINDOW_MS = 25

/**
 * Shares the process between tenants while it is contended (TENANT_REQUESTS_WHEN_BUSY,
 * lib/tenants/shares.ts). Registered at the root before the refusal pace: the place is taken
 * once the request is authenticated (preHandler, before the route's own work) and given back
 * as soon as the answer is ready, before a paced refusal is held, so that a stranger's held
 * refusals never keep the tenant's places.
 */
export default fp(async function tenantSharesPlugin (fastify) {
  const perTenant = fastify.config.tenantRequestsWhenBusy
  if (perTenant === null) return
  const probe = new EventLoopProbe(BUSY_UTILISATION, BUSY_WINDOW_MS)
  fastify.addHook('onClose', (_instance, done) => {
    probe.stop()
    done()
  })
  const shares = new TenantShares(perTenant, probe)
  const { registry } = fastify.metrics
  const waited = new Counter({ name: 'email_otp_tenant_requests_waited_total', help: 'Requests that waited for one of their tenant\'s own to finish (TENANT_REQUESTS_WHEN_BUSY): the event loop was busy and another tenant had requests.', registers: [registry] })
  registry.registerMetric(new Gauge({
    name: 'email_otp_tenant_requests_waiting',
    help: 'Requests waiting now for one of their tenant\'s own to finish.',
    registers: [],
    collect () { this.set(shares.waiting) }
  }))

  const leave = (request: { tenantPlace: string | null }): void => {
    if (request.tenantPlace === null) return
    shares.leave(request.tenantPlace)
    request.tenantPlace = null
  }

  fastify.decorateRequest('tenantPlace', null)
  // Root hooks of a phase run before the API scope's: this one runs after authentication
  // (preValidation) and before the abuse guard, the CAPTCHA, idempotency and the handler.
  fastify.addHook('preHandler', (request, _reply, done) => {
    // Routes outside the API scope have no `auth` at all.
    const key = request.auth as typeof request.auth | undefined
    if (key === null || key === undefined) {
      done()
      return
    }
    const tenantId = key.tenant.id
    const wait = shares.enter(tenantId)
    if (wait === null) {
      request.tenantPlace = tenantId
      done()
      return
    }
    waited.inc()
    void wait.then(() => {
      request.tenantPlace = tenantId
      done()
    })
  })
  fastify.addHook('onSend', (request, _reply, payload, done) => {
    leave(request)
    done(null, payload)
  })
  // An answer that never reaches onSend: its place is given back all the same.
  fastify.addHook('onResponse', (request, _reply, done) => {
    leave(request)
    done()
  })
  fastify.addHook('onRequestAbort', (request, done) => {
    leave(request)
    done()
  })
}, { name: 'tenant-shares', dependencies: ['config', 'metrics'], fastify: '5.x' })
