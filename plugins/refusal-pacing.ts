import type { FastifyRequest } from 'fastify'
import fp from 'fastify-plugin'
import { Counter, Gauge } from 'prom-client'
import { RefusalPacer } from '../lib/net/refusal-pacing.js'
import { sourceBucket } from '../lib/net/source-address.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * `every-4xx`: every 4xx of the route is a refusal to pace, not only 401, 403 and 429. For a
     * route without a key whose every 4xx refuses a message nobody genuine sends
     * (POST /feedback/ses): a 400 there costs the parse of a body, and is asked again at once.
     */
    paceRefusals?: 'every-4xx'
    /**
     * The prefix an IPv6 source of the route is paced by, when shorter than IPV6_BUCKET_PREFIX:
     * 48 for a route without a key (POST /feedback/ses), where a /48 of 65,536 /64s is free to
     * have and each /64 would otherwise start with a burst of its own.
     */
    paceIpv6Prefix?: number
  }
  interface FastifyRequest {
    /**
     * Set by a route for an error answer that is not a 4xx but that its sender brought about
     * and may ask for again at once (POST /feedback/ses's 503 for a certificate it named that
     * cannot be had now): paced like its refusals. A 5xx of the service's own trouble is not.
     */
    pacedAsRefusal: boolean
  }
}

/** Sources whose pace is remembered at once (a few MB at most). */
const PACED_SOURCES = 100_000
/** Refusals held at once in the process: past it they are answered at once, as without a pace. */
const HELD_REFUSALS = 10_000

/** The answers a caller gets for asking what it may not: these are paced. */
function isRefusal (status: number, request: FastifyRequest): boolean {
  if (status === 429 || status === 401 || status === 403) return true
  if (request.pacedAsRefusal && status >= 400) return true
  return status >= 400 && status < 500 && request.routeOptions.config.paceRefusals === 'every-4xx'
}

/**
 * Paces the refusals of each client (REFUSAL_PACE_*, lib/net/refusal-pacing.ts): past its
 * burst, a source that keeps being refused gets its answers held, up to the maximum delay.
 * The source is the one the per-source buckets count: the client address (behind TRUST_PROXY,
 * the forwarded one, so a proxy's other clients are not held; behind a mesh gateway, the end
 * client it forwarded), per IPV6_BUCKET_PREFIX, or an internal caller's workload identity
 * (every workload behind a sidecar has the sidecar's address). A partner's backend is the
 * source of its secret key's requests, not the End-User-IP it names: it is the one that keeps
 * asking. Admitted answers are never held. A route whose config says `paceRefusals: 'every-4xx'`
 * has each of its 4xx paced too, and a route may mark an answer paced (`pacedAsRefusal`).
 */
export default fp(async function refusalPacingPlugin (fastify) {
  const { refusalPace, ipv6BucketPrefix } = fastify.config
  fastify.decorateRequest('pacedAsRefusal', false)
  if (refusalPace === null) return
  const pacer = new RefusalPacer({ ...refusalPace, maxSources: PACED_SOURCES, maxHeld: HELD_REFUSALS })
  const { registry } = fastify.metrics
  const paced = new Counter({ name: 'email_otp_refusals_paced_total', help: 'Refusals held before they were sent (REFUSAL_PACE_*): their sources kept asking past the pace.', registers: [registry] })
  registry.registerMetric(new Gauge({
    name: 'email_otp_refusals_held',
    help: 'Refusals being held now.',
    registers: [],
    collect () { this.set(pacer.held) }
  }))
  const sourceOf = (request: FastifyRequest): string => {
    if (request.meshSource !== null) return request.meshSource
    const client = request.clientAddress === '' ? request.ip : request.clientAddress
    return sourceBucket(client, Math.min(ipv6BucketPrefix, request.routeOptions.config.paceIpv6Prefix ?? ipv6BucketPrefix)) ?? client
  }
  // Synchronous, like the other hooks on the hot path: most answers pass straight through.
  fastify.addHook('onSend', (request, reply, payload, done) => {
    if (!isRefusal(reply.statusCode, request)) {
      done(null, payload)
      return
    }
    if (pacer.hold(sourceOf(request), () => { done(null, payload) })) paced.inc()
  })
  // A shutdown answers what is held at once rather than wait for it.
  fastify.addHook('preClose', (done) => {
    pacer.release()
    done()
  })
}, { name: 'refusal-pacing', dependencies: ['config', 'client-address', 'workload-identity', 'metrics'], fastify: '5.x' })
