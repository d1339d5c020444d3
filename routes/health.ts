import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { LiveReply, ReadyReply } from '../schemas/health.js'

const healthRoutes: FastifyPluginAsyncTypebox = async function healthRoutes (fastify) {
  fastify.get('/healthz', {
    schema: {
      summary: 'Liveness: the process answers',
      tags: ['operations'],
      response: { 200: LiveReply }
    }
  }, async () => ({ ok: true as const }))

  fastify.get('/readyz', {
    schema: {
      summary: 'Readiness: the token store and the mailer are usable',
      tags: ['operations'],
      response: { 200: ReadyReply, 503: ReadyReply }
    }
  }, async (_request, reply) => {
    const [tokenStore, mailer] = await Promise.all([fastify.backend.ready(), fastify.mailer.ready()])
    const ready = tokenStore && mailer
    return reply.code(ready ? 200 : 503).send({
      ready,
      checks: {
        tokenStore: { ok: tokenStore, kind: fastify.backend.kind },
        mailer: { ok: mailer, kind: fastify.mailer.transport }
      },
      blocklists: fastify.blocklists.status()
    })
  })
}

export default healthRoutes
