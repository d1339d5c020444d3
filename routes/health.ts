import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { errorResponses, urlErrors } from '../schemas/errors.js'
import { LiveReply, ReadyReply } from '../schemas/health.js'
import { ref } from '../schemas/ref.js'

const healthRoutes: FastifyPluginAsyncTypebox = async function healthRoutes (fastify) {
  fastify.get('/healthz', {
    schema: {
      operationId: 'getLiveness',
      summary: 'Liveness: the process answers',
      tags: ['operations'],
      security: [],
      response: {
        200: ref(LiveReply, { description: 'The process is up. Nothing else is checked: an outage of Redis or of the mailer does not fail it.' }),
        ...errorResponses(urlErrors)
      }
    }
  }, async () => ({ ok: true as const }))

  fastify.get('/readyz', {
    schema: {
      operationId: 'getReadiness',
      summary: 'Readiness: the token store and the mailer are usable',
      tags: ['operations'],
      security: [],
      response: {
        200: ref(ReadyReply, { description: 'Ready: the token store and the mailer are usable.' }),
        503: ref(ReadyReply, { description: 'Not ready: `checks` tells which dependency is not usable. Take the instance out of rotation; do not restart it for this.' }),
        ...errorResponses(urlErrors)
      }
    }
  }, async (_request, reply) => {
    const [tokenStore, mailer] = await Promise.all([fastify.tokenStore.ready(), fastify.mailer.ready()])
    const ready = tokenStore && mailer
    return reply.code(ready ? 200 : 503).send({
      ready,
      checks: {
        tokenStore: { ok: tokenStore, kind: fastify.tokenStore.kind },
        mailer: { ok: mailer, kind: fastify.mailer.transport }
      },
      blocklists: fastify.blocklists.status()
    })
  })
}

export default healthRoutes
