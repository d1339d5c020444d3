import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { perKey } from '../plugins/external/rate-limit.js'
import { callerOf } from '../plugins/otp.js'
import { bodyErrors, commonErrors, errorResponses } from '../schemas/errors.js'
import { UnlockBody, UnlockReply } from '../schemas/recipients.js'
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
}

export default recipientRoutes
