import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'

const Check = Type.Object({ ok: Type.Boolean(), kind: Type.String() })

const BlockListStatus = Type.Object({
  name: Type.String(),
  entries: Type.Integer(),
  loadedAt: Type.Union([Type.String(), Type.Null()]),
  ageSeconds: Type.Union([Type.Number(), Type.Null()]),
  lastError: Type.Union([Type.String(), Type.Null()])
})

const ReadyReply = Type.Object({
  ready: Type.Boolean(),
  checks: Type.Object({ tokenStore: Check, mailer: Check }),
  blocklists: Type.Array(BlockListStatus, { description: 'Size and age of each network block list; a list whose refresh fails keeps serving its last good version.' })
})

const healthRoutes: FastifyPluginAsyncTypebox = async function healthRoutes (fastify) {
  fastify.get('/healthz', {
    schema: {
      summary: 'Liveness: the process answers',
      tags: ['operations'],
      response: { 200: Type.Object({ ok: Type.Literal(true) }) }
    }
  }, async () => ({ ok: true as const }))

  fastify.get('/readyz', {
    schema: {
      summary: 'Readiness: the token store and the mailer are usable',
      tags: ['operations'],
      response: { 200: ReadyReply, 503: ReadyReply }
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
