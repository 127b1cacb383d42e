//! The future of a blocked call (`lock`, `lock_on`, `await_all_locks`): the agent's answer or,
//! when it is dropped before that answer, the call withdrawn.
//!
//! Cancel safety: a call's request is made when the call is made, so the future alone knows
//! whether anybody still waits for it. Dropped unanswered (`tokio::time::timeout`, a
//! `select!` branch that lost, a task aborted), it sends the agent [`Withdraw`], which comes
//! after the call's own message in the agent's mailbox: the agent forgets the caller and undoes
//! what the call asked for (`AgentCore::withdraw`). An answer that was already on its way is
//! kept: the lock is then held, claimed and reported as any grant (`lock_state`, `events`).

use crate::actor::{Agent, Outcome, Withdraw, outcome_error};
use crate::core::CallId;
use crate::error::Error;
use actix::Addr;
use futures::channel::oneshot;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The answer to blocked call `call` of the agent at `agent` (see the module documentation).
pub(crate) struct Pending<T> {
    rx: oneshot::Receiver<Result<T, Error>>,
    outcome: Outcome,
    /// The agent and the call to withdraw if the future is dropped unanswered.
    withdraw: Option<(Addr<Agent>, CallId)>,
}

impl<T> Pending<T> {
    pub(crate) fn new(
        rx: oneshot::Receiver<Result<T, Error>>,
        outcome: Outcome,
        agent: Addr<Agent>,
        call: CallId,
    ) -> Pending<T> {
        Pending {
            rx,
            outcome,
            withdraw: Some((agent, call)),
        }
    }
}

impl<T> Future for Pending<T> {
    type Output = Result<T, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = match Pin::new(&mut self.rx).poll(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Ok(result)) => result,
            // The agent stopped without answering: the outcome says why.
            Poll::Ready(Err(_)) => Err(outcome_error(&self.outcome)),
        };
        self.withdraw = None;
        Poll::Ready(answer)
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        let Some((agent, call)) = self.withdraw.take() else {
            return;
        };
        // Answered already (the answer is in the channel, or the agent is gone): nothing
        // waits in the agent.
        if !matches!(self.rx.try_recv(), Ok(None)) {
            return;
        }
        agent.do_send(Withdraw(call));
    }
}
