import fp from 'fastify-plugin'

export interface Drain {
  /** True from SIGTERM on: readiness answers 503 while every route keeps serving. */
  readonly draining: boolean
  /** Starts the drain; idempotent. */
  start: () => void
}

declare module 'fastify' {
  interface FastifyInstance {
    drain: Drain
  }
}

/**
 * The first phase of a shutdown (server.ts). Kubernetes sends SIGTERM at the same moment it
 * starts taking the pod out of its Service's endpoints; kube-proxy, the mesh's sidecars and
 * the load balancers learn that a few seconds later and keep sending until then. During
 * SHUTDOWN_DRAIN_MS the service keeps answering everything, says "not ready" to whoever
 * still asks, and closes each keep-alive connection after its next answer, so that clients
 * reconnect to a pod that stays.
 */
export default fp(async function drainPlugin (fastify) {
  let draining = false
  fastify.decorate('drain', {
    get draining () { return draining },
    start () { draining = true }
  })
  fastify.addHook('onRequest', (_request, reply, done) => {
    if (draining) reply.header('connection', 'close')
    done()
  })
}, { name: 'drain', fastify: '5.x' })
