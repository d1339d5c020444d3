import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { perKey } from '../plugins/external/rate-limit.js'
import { callerOf } from '../plugins/services.js'
import { bodyErrors, commonErrors, errorResponses } from '../schemas/errors.js'
import { SuppressBody, SuppressReply, UnlockBody, UnlockReply, UnsuppressReply } from '../schemas/recipients.js'
import { ref } from '../schemas/ref.js'

const recipientRoutes: FastifyPluginAsyncTypebox = async function recipientRoutes (fastify) {
  fastify.post('/recipients/unlock', {
    config: { keyKinds: ['secret'], rateLimit: perKey(fastify.config.routeLimits.account) },
    schema: {
      operationId: 'unlockRecipient',
      summary: 'Clear a recipient\'s lock after wrong guesses',
      description: 'Consecutive wrong guesses lock a recipient mailbox (dispatch answers 429, its outstanding codes no longer verify), for longer with each further one. A tenant that has confirmed its user another way clears the lock and the run of failures here, for the key\'s mode (live or sandbox). Secret keys only.',
      tags: ['account'],
      security: [{ bearerAuth: [] }],
      body: ref(UnlockBody),
      response: {
        200: ref(UnlockReply, { description: 'The mailbox is free of any lock and run of wrong guesses, in the key\'s mode.' }),
        ...errorResponses([...commonErrors, ...bodyErrors, 'INVALID_EMAIL', 'KEY_NOT_PERMITTED'])
      }
    }
  }, async function unlock (request) {
    const cleared = await fastify.otp.clearLockout(callerOf(request), request.body.email)
    return { success: true as const, message: cleared ? 'The recipient\'s lock is cleared' : 'The recipient had no lock', data: { cleared } }
  })

  fastify.post('/recipients/suppress', {
    config: { keyKinds: ['secret'], rateLimit: perKey(fastify.config.routeLimits.account) },
    schema: {
      operationId: 'suppressRecipient',
      summary: 'Stop sending codes to a recipient',
      description: 'Suppresses a recipient mailbox (every spelling) in the key\'s tenant and mode for SUPPRESSION_DAYS: dispatch to it sends nothing, charges nothing and answers 422 `RECIPIENT_SUPPRESSED` (a restricted key hears 502 `DELIVERY_FAILED`). SES feedback does this by itself for permanent bounces and complaints; a partner on SMTP, which has no feedback channel, feeds the bounces and complaints it receives here. Suppressing again restarts the period. Secret keys only.',
      tags: ['account'],
      security: [{ bearerAuth: [] }],
      body: ref(SuppressBody),
      response: {
        200: ref(SuppressReply, { description: 'The mailbox is suppressed in the key\'s mode.' }),
        ...errorResponses([...commonErrors, ...bodyErrors, 'INVALID_EMAIL', 'KEY_NOT_PERMITTED'])
      }
    }
  }, async function suppress (request) {
    await fastify.otp.suppress(callerOf(request), request.body.email)
    const suppressedUntil = new Date(Date.now() + fastify.config.suppressionMs).toISOString()
    return { success: true as const, message: 'The recipient is suppressed', data: { suppressedUntil } }
  })

  fastify.post('/recipients/unsuppress', {
    config: { keyKinds: ['secret'], rateLimit: perKey(fastify.config.routeLimits.account) },
    schema: {
      operationId: 'unsuppressRecipient',
      summary: 'Lift a recipient\'s suppression',
      description: 'Ends the suppression of a recipient mailbox (every spelling) in the key\'s tenant and mode, whatever set it (a bounce, a complaint, or /recipients/suppress). Secret keys only.',
      tags: ['account'],
      security: [{ bearerAuth: [] }],
      body: ref(SuppressBody),
      response: {
        200: ref(UnsuppressReply, { description: 'The mailbox is not suppressed in the key\'s mode.' }),
        ...errorResponses([...commonErrors, ...bodyErrors, 'INVALID_EMAIL', 'KEY_NOT_PERMITTED'])
      }
    }
  }, async function unsuppress (request) {
    const lifted = await fastify.otp.unsuppress(callerOf(request), request.body.email)
    return { success: true as const, message: lifted ? 'The recipient\'s suppression is lifted' : 'The recipient was not suppressed', data: { lifted } }
  })
}

export default recipientRoutes
